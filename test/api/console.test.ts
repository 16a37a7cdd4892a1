// GET /console over HTTP: the page is served without a credential, carries no secret, locks
// itself down (CSP, no referrer), and everything it shows it reads from the read routes a
// browser token may call (test/api/browser-tokens.test.ts proves what such a token may do).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTestDatabase, startApi, temporalClient, testConfig, uniqueQueue, type RunningApi, type TestDatabase } from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('console') });
let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

test('the console is a static page served without a credential, locked down, calling only the token-readable routes', async () => {
  const res = await fetch(`${api.baseUrl}/console`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
  assert.match(res.headers.get('content-security-policy') ?? '', /frame-ancestors 'none'/);
  assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
  const html = await res.text();
  assert.match(html, /<form id="login">/);
  assert.doesNotMatch(html, /vo_live_|BROWSER_TOKEN_SECRET|dev-browser-token-secret/);
  // Every /v1 path the page names is one a read token may call (or usage/budget, shown when served).
  const paths = new Set([...html.matchAll(/'(\/v1\/[a-z/?=0-9-]*)/g)].map((m) => m[1]!.split('?')[0]));
  assert.deepEqual([...paths].sort(), ['/v1/budget', '/v1/events', '/v1/tasks', '/v1/tasks/', '/v1/usage']);
  // The token goes in a header, never in a URL.
  assert.doesNotMatch(html, /access_token|[?&]token=/);
});
