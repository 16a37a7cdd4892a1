// Automatic narrowing (docs/modes.md): with Postgres unreachable from the API, creates and
// reads answer 503 with a clear problem body (never 500) and callbacks are spooled with a 2xx,
// then replayed into the inbox once Postgres answers again; with Temporal unreachable creates
// are accepted into the outbox until its watermark (count or age), then answer 503.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { createAdmission } from '../../api/admission';
import { spoolStatus } from '../../storage/spool-files';
import { HttpProblem } from '../../api/problem';
import { createDatabase } from '../../db/client';
import { callbackInbox } from '../../db/schema';
import { createGenerationFacade } from '../../temporal/facade';
import { relayOnce } from '../../workers/outbox-relay';
import { eventually, http, temporalClient, testLogger } from '../support/stack';
import { startModesStack, startTcpProxy, type ModesStack, type TcpProxy } from '../ops/support';

describe('Postgres unreachable from the API', () => {
  let s: ModesStack;
  let proxy: TcpProxy;
  before(async () => {
    const pgPort = Number(new URL(process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/x').port || 5432);
    proxy = await startTcpProxy(pgPort);
    s = await startModesStack(
      'pg-outage',
      {},
      {
        generationMs: 2_000,
        apiDatabase: (url) => {
          const proxied = new URL(url);
          proxied.host = `127.0.0.1:${proxy.port}`;
          return createDatabase({ url: proxied.toString(), max: 5, applicationName: 'vidorch-api-proxied' });
        },
      },
    );
  });
  after(async () => {
    await proxy?.restore().catch(() => undefined);
    await s?.close();
    await proxy?.close();
  });

  test('creates and reads answer 503 with a clear problem body, callbacks are spooled with 2xx and replayed into the inbox after recovery', async () => {
    const id = await s.createTask('pg-1');
    await eventually(async () => {
      const t = await s.getTask(id);
      return ['SUBMITTED', 'RUNNING'].includes(t.status) ? t : undefined;
    }, 30_000);
    const inboxBefore = await s.tdb.database.db
      .select()
      .from(callbackInbox)
      .where(and(eq(callbackInbox.task_id, id), eq(callbackInbox.source, 'callback')));

    // Why each callback was spooled, and which provider events were, as recorded with them.
    const whys: string[] = [];
    const spooledEvents: string[] = [];
    const spool = s.ctx.spool as { append: typeof s.ctx.spool.append };
    const append = spool.append.bind(s.ctx.spool);
    spool.append = async (rec) => {
      await append(rec);
      // Recorded once on disk: a line that failed to append was never acknowledged.
      whys.push(rec.why);
      if (rec.providerEventId) spooledEvents.push(rec.providerEventId);
    };

    await proxy.cut();
    try {
      for (const res of [
        await s.create('pg-2'),
        await http(s.apiUrl, 'GET', `/v1/tasks/${id}`, { apiKey: s.tenant.apiKey }),
        await http(s.apiUrl, 'GET', '/v1/tasks', { apiKey: s.tenant.apiKey }),
      ]) {
        assert.equal(res.status, 503, JSON.stringify(res.body));
        assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
        assert.match(res.body.detail, /database is unreachable/);
        assert.ok(res.headers.get('retry-after'));
      }
      const ready = await http(s.opsUrl, 'GET', '/readyz');
      assert.equal(ready.status, 503);
      assert.ok(
        ready.body.reasons.some((r: string) => /database is unreachable/.test(r)),
        JSON.stringify(ready.body),
      );
      assert.equal(ready.body.admits.callback, 'spool');

      // The provider finishes while the API cannot reach Postgres: its callback is spooled.
      await eventually(async () => ((await s.ctx.spool.pending()) >= 1 ? true : undefined), 30_000);
      assert.ok(whys.length >= 1 && whys.every((w) => w === 'database-unavailable'), `spooled because: ${whys.join(', ')}`);
    } finally {
      await proxy.restore();
    }
    await eventually(async () => ((await s.ctx.spool.pending()) === 0 ? true : undefined), 15_000);
    // Every spooled event reaches the inbox: replayed, or stored before the cut if the spooled one
    // was a redelivery (a provider retries a webhook whose 2xx came too slowly). Read until it is
    // there: a callback whose handler began during the cut may be spooled after the count above.
    const inboxRows = () =>
      s.tdb.database.db
        .select()
        .from(callbackInbox)
        .where(and(eq(callbackInbox.task_id, id), eq(callbackInbox.source, 'callback')));
    let stored = new Set<string | null>();
    const inboxAfter = await eventually(async () => {
      const rows = await inboxRows();
      stored = new Set(rows.map((r) => r.provider_event_id));
      return spooledEvents.every((ev) => stored.has(ev)) ? rows : undefined;
    }, 15_000).catch(() => assert.fail(`spooled ${spooledEvents.join(', ')}; inbox ${[...stored].join(', ')}`));
    assert.ok(spooledEvents.length >= 1);
    assert.equal((await spoolStatus(s.ctx.spool.dir)).deadLetters, 0, 'no spooled callback was set aside');
    assert.ok(inboxAfter.length >= inboxBefore.length);
    await s.waitForStatus(id, 'SUCCEEDED', 60_000);
    assert.equal((await s.create('pg-3')).status, 202, 'creates admitted again');
  });
});

describe('Temporal unreachable: creates go to the outbox up to its watermark', () => {
  let s: ModesStack;
  before(async () => {
    const dead = createGenerationFacade(async () => (await temporalClient({ ...s.config, TEMPORAL_ADDRESS: '127.0.0.1:1' })).client, 'unused');
    s = await startModesStack('watermark', { OUTBOX_WATERMARK_COUNT: '3', API_FAST_PATH_TIMEOUT_MS: '200' }, { worker: false, facade: dead });
  });
  after(async () => {
    await s?.close();
  });

  test('creates are accepted while Temporal is down until the backlog passes the count watermark, then 503 with Retry-After until the relay drains it', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i += 1) ids.push(await s.createTask(`wm-${i}`));
    const over = await s.create('wm-over');
    assert.equal(over.status, 503, JSON.stringify(over.body));
    assert.match(over.body.detail, /outbox backlog over its watermark/);
    assert.equal(over.headers.get('retry-after'), '30');
    const ready = await http(s.opsUrl, 'GET', '/readyz');
    assert.equal(ready.status, 503);
    assert.equal(ready.body.outbox.backlog, 4);

    // Temporal is back: the relay publishes the backlog and admission reopens.
    const facade = createGenerationFacade(async () => s.client, s.config.TEMPORAL_TASK_QUEUE);
    const relayed = await relayOnce({
      db: s.tdb.database.db,
      fence: { scope: s.config.FENCE_SCOPE, region: s.config.REGION },
      facade,
      logger: testLogger,
      batchSize: 10,
      intervalMs: 10,
    });
    assert.equal(relayed.published, 4);
    assert.equal((await s.create('wm-after')).status, 202);
    for (const id of ids) await s.client.workflow.getHandle(facade.workflowIdFor(id)).terminate('test cleanup');
  });

  test('the age watermark: an unpublished task older than the limit narrows admission', async () => {
    const admission = createAdmission(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, region: s.config.REGION }, 0, {
      watermark: { count: 1_000, ageMs: 1_000 },
    });
    await admission.assertCanCreate();
    await new Promise((r) => setTimeout(r, 1_200));
    await assert.rejects(admission.assertCanCreate(), (err) => err instanceof HttpProblem && err.status === 503 && /waited/.test(err.message));
  });
});
