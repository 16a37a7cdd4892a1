// Kling's contract: every request our adapter can send (each Kling model of the catalog, every
// resolution and duration it maps, the status read, the lookup by our key) is checked against the
// published request shapes (test/providers/fixtures/kling-api.ts), and every task the simulator
// serves carries only documented fields.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MODEL_CATALOG } from '../../domain/catalog';
import { createKlingAdapter } from '../../providers/kling';
import { signKlingJwt } from '../../providers/kling-jwt';
import { SIM_KLING_DEFAULTS } from '../../providers/simulator/kling';
import { contractProblems, recordingFetch, type RecordedRequest } from './fixtures/contract';
import { KLING_ENDPOINTS, KLING_ENVELOPE_FIELDS, KLING_TASK_FIELDS, KLING_TASK_STATUSES } from './fixtures/kling-api';
import { lookupQuery, newAttempt, startHarness, type Harness } from './harness';

let h: Harness;
before(async () => {
  h = await startHarness({ kling: { concurrency: 50 } });
  // Callbacks would go to api.example.com: none leaves this machine.
  h.sim.setFaults({ callbacks: 'off' });
});
after(() => h.close());

const undocumented = (o: object, fields: readonly string[]) => Object.keys(o).filter((k) => !fields.includes(k));

test('every request the Kling adapter can send matches the documented request shapes (paths, methods, required fields, enums)', async () => {
  const calls: RecordedRequest[] = [];
  const { accessKey, secretKey } = SIM_KLING_DEFAULTS;
  const adapter = createKlingAdapter({ baseUrl: `${h.sim.baseUrl()}/kling`, accessKey, secretKey, timeoutMs: 2_000, fetch: recordingFetch(calls) });
  const routes = MODEL_CATALOG.flatMap((m) => m.routes).filter((r) => r.provider === 'kling');
  assert.ok(routes.length > 0);
  const ids: string[] = [];
  for (const route of routes) {
    for (const resolution of route.resolutions) {
      for (const duration of [1, 5, 6, route.maxDurationSeconds]) {
        const out = await adapter.submit({
          ...newAttempt('https://api.example.com', 'kling'),
          model: route.model,
          input: { prompt: 'contract', duration, resolution },
        });
        // A duration the model does not take is refused before any call, never rounded to 5 or 10.
        if (!(route.durationsSeconds ?? [duration]).includes(duration)) {
          assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [false, null], `${route.model} ${duration}s`);
          continue;
        }
        assert.equal(out.kind, 'accepted', `${route.model} ${resolution} ${duration}s: ${JSON.stringify(out)}`);
        if (out.kind === 'accepted') ids.push(out.job.jobId);
      }
    }
  }
  for (const id of ids.slice(0, 2)) await adapter.getJob(id);
  await adapter.cancel(ids[0]!); // no cancel API: no request at all
  assert.equal((await adapter.findByCorrelationToken(lookupQuery('never-submitted'))).kind, 'not-found-unproven');

  for (const c of calls) {
    assert.deepEqual(contractProblems(KLING_ENDPOINTS, '/kling', c), []);
    assert.match(c.headers['authorization'] ?? '', /^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
  }
  assert.equal(
    calls.filter((c) => c.method === 'GET' && c.url.pathname.endsWith('/v1/videos/text2video')).length,
    0,
    'the list is never used to look for a key',
  );
});

test('tasks the simulator serves carry only documented fields; a miss is 404 code 1203, or 400 code 1201 as the live API answered', async () => {
  const { accessKey, secretKey } = SIM_KLING_DEFAULTS;
  const adapter = createKlingAdapter({ baseUrl: `${h.sim.baseUrl()}/kling`, accessKey, secretKey, timeoutMs: 2_000 });
  const a = newAttempt('https://api.example.com', 'kling');
  const out = await adapter.submit({ ...a, model: 'kling-v2-master', input: { prompt: 'fields' } });
  assert.equal(out.kind, 'accepted');
  const bodies: { status: number; json: Record<string, unknown> }[] = [];
  const calls: RecordedRequest[] = [];
  const peek = recordingFetch(calls);
  const get = async (path: string) => {
    const res = await peek(`${h.sim.baseUrl()}/kling${path}`, {
      headers: { authorization: `Bearer ${signKlingJwt(accessKey, secretKey, Math.floor(Date.now() / 1000), 600)}` },
    });
    bodies.push({ status: res.status, json: (await res.json()) as Record<string, unknown> });
  };
  await get(`/v1/videos/text2video/${a.attemptId}`);
  await get('/v1/videos/text2video?pageNum=1&pageSize=30');
  await get('/v1/videos/text2video/no-such-task');
  h.sim.setFaults({ callbacks: 'off', kling_not_found: '400-1201' });
  await get('/v1/videos/text2video/no-such-task');
  h.sim.setFaults({ callbacks: 'off' });
  for (const b of bodies) assert.deepEqual(undocumented(b.json, KLING_ENVELOPE_FIELDS), []);
  const [one, list, miss, liveMiss] = bodies as [(typeof bodies)[0], (typeof bodies)[0], (typeof bodies)[0], (typeof bodies)[0]];
  for (const t of [one.json['data'], ...(list.json['data'] as unknown[])] as Record<string, unknown>[]) {
    assert.deepEqual(undocumented(t, KLING_TASK_FIELDS), []);
    assert.ok((KLING_TASK_STATUSES as readonly unknown[]).includes(t['task_status']));
  }
  assert.deepEqual([miss.status, miss.json['code']], [404, 1203]);
  assert.deepEqual([liveMiss.status, liveMiss.json['code']], [400, 1201]);
  for (const c of calls) assert.deepEqual(contractProblems(KLING_ENDPOINTS, '/kling', c), []);
});
