// vidorch_callback_lag_seconds and vidorch_poll_fallback_ratio are computed per provider from
// callback_inbox facts (docs/providers.md "Callback lag and poll fallback"). Rows with known
// times go into a real database; the scrape must report exactly what they imply.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox } from '../../db/schema';
import { startFactSampler } from '../../observability/facts';
import { createMetrics } from '../../observability/metrics';
import type { ProviderJobState } from '../../providers/types';
import { createTestDatabase, testConfig, testLogger, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
before(async () => {
  tdb = await createTestDatabase(testConfig());
});
after(async () => {
  await tdb?.drop();
});

let seq = 0;
/**
 * One inbox row: `provider` learned `state` of `attemptId` through `source`, `agoS` seconds
 * ago, about a change the provider made `lagS` seconds before that.
 */
async function event(o: {
  provider: string;
  attemptId: string;
  state: ProviderJobState;
  source: 'callback' | 'poll' | 'reconcile';
  agoS: number;
  lagS: number;
}) {
  seq += 1;
  const id = await recordProviderEvent(tdb.database.db, {
    provider: o.provider,
    job: {
      jobId: `job-${o.attemptId}`,
      state: o.state,
      rawStatus: o.state,
      updatedAt: new Date(),
      outputUrl: null,
      error: null,
      correlationToken: null,
      metrics: null,
    },
    providerEventId: `ev-${seq}`,
    source: o.source,
    attemptId: o.attemptId,
    taskId: randomUUID(),
    receivedRegion: 'region-a',
    signatureValid: true,
    raw: {},
    processError: 'test row',
  });
  await tdb.database.db
    .update(callbackInbox)
    .set({
      received_at: sql`now() - make_interval(secs => ${o.agoS})`,
      provider_updated_at: sql`now() - make_interval(secs => ${o.agoS + o.lagS})`,
    })
    .where(eq(callbackInbox.inbox_id, id!));
}

/** `name{labels} value` lines of a scrape, as label string → value. */
function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`).exec(line);
    if (m) out.set(m[1]!.replace(/,?service="[^"]*"/, ''), Number(m[2]));
  }
  return out;
}

describe('provider metrics from inbox facts', () => {
  test('callback lag quantiles and the poll-fallback ratio are reported per provider, over their windows', async () => {
    const [a, b, c, d, old] = [randomUUID(), randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    // replicate: a's success came by callback (2 s late); b's was polled first, its callback
    // (4 s late) came after. Lag counts both callbacks; the ratio counts b as a fallback.
    await event({ provider: 'replicate', attemptId: a, state: 'running', source: 'poll', agoS: 50, lagS: 1 });
    await event({ provider: 'replicate', attemptId: a, state: 'succeeded', source: 'callback', agoS: 40, lagS: 2 });
    await event({ provider: 'replicate', attemptId: b, state: 'succeeded', source: 'poll', agoS: 31, lagS: 1 });
    await event({ provider: 'replicate', attemptId: b, state: 'succeeded', source: 'callback', agoS: 30, lagS: 4 });
    // fal: c found by a reconciliation lookup only; d's failure came by callback, 10 s late.
    await event({ provider: 'fal', attemptId: c, state: 'succeeded', source: 'reconcile', agoS: 20, lagS: 3 });
    await event({ provider: 'fal', attemptId: d, state: 'failed', source: 'callback', agoS: 10, lagS: 10 });
    // Outside both windows (lag: 5 min, ratio: 15 min): counted nowhere.
    await event({ provider: 'kling', attemptId: old, state: 'succeeded', source: 'poll', agoS: 3_600, lagS: 100 });
    await event({ provider: 'kling', attemptId: randomUUID(), state: 'succeeded', source: 'callback', agoS: 600, lagS: 100 });

    const sampler = startFactSampler({ databaseUrl: tdb.url, intervalMs: 60_000, logger: testLogger, applicationName: 'metrics-test' });
    await sampler.refresh();
    const text = await createMetrics({ service: 'metrics-test', facts: sampler.latest }).registry.metrics();
    await sampler.stop();
    const lag = samples(text, 'vidorch_callback_lag_seconds');
    const close = (actual: number | undefined, expected: number, what: string) =>
      assert.ok(actual !== undefined && Math.abs(actual - expected) < 0.01, `${what}: ${actual} ≠ ${expected}`);
    close(lag.get('provider="replicate",quantile="0.5"'), 3, 'replicate p50 of 2 s and 4 s');
    close(lag.get('provider="replicate",quantile="0.95"'), 3.9, 'replicate p95 of 2 s and 4 s');
    close(lag.get('provider="fal",quantile="0.5"'), 10, 'fal p50');
    assert.ok(![...lag.keys()].some((k) => k.includes('kling')), 'kling has no callback in the last 5 minutes');

    const ratio = samples(text, 'vidorch_poll_fallback_ratio');
    assert.deepEqual(Object.fromEntries(ratio), { 'provider="replicate"': 0.5, 'provider="fal"': 0.5, 'provider="kling"': 0 });
  });
});
