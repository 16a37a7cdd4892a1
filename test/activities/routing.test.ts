// Routing a task's attempts across providers (docs/design.md §5–§6), as the activities do
// it against real Postgres and the simulator: the first attempt goes where the score says, a
// proven rejection fails over to another compatible provider, and an attempt whose outcome was
// ever unknown pins the task to its provider.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { asc, eq } from 'drizzle-orm';
import { routeNextAttempt, type AttemptRecord } from '../../activities/routing';
import { createTask, testRouting } from '../support/deps';
import { generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { MODEL_CATALOG, RESOLUTIONS, requestRefusal, routeRefusal } from '../../domain/catalog';
import type { ProviderHealth } from '../../domain/router';
import { freshActivities, provingAbsence, runActivity, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // A fixed health view: the breakers these tests trip must not steer the later tests' routes.
  w = await startActivityWorld({ config: { UNKNOWN_PROOF_DELAY_MS: '0', SUBMIT_SEND_WINDOW_MS: '300' }, deps: (d) => ({ ...d, providerHealth: () => ({}) }) });
});
after(() => w?.close());
beforeEach(() => w.sim.sim.clearFaults());
const run: ActivityWorld['run'] = (name, ...args) => w.run(name, ...args);

let seq = 0;
async function familyTask(extra: Record<string, unknown> = {}): Promise<string> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `route-${seq}-${Date.now()}`,
    body: { model: 'kling-v2', prompt: `route ${seq}`, duration_seconds: 5, resolution: '720p', priority: 0, ...extra },
  });
  await run('dispatchTask', created.task.task_id);
  return created.task.task_id;
}

const attemptsOf = (taskId: string) => w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
const taskOf = async (taskId: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!;

describe('routing attempts through the activities', () => {
  test('a family task is created with the static first choice and routed by score at its first attempt; the decision is recorded', async () => {
    const taskId = await familyTask();
    const facts = await run('prepareAttempt', taskId);
    assert.equal(facts.status, 'SUBMITTING');
    const [a1] = await attemptsOf(taskId);
    assert.equal(a1!.provider, 'kling', 'the cheapest healthy provider');
    assert.equal(a1!.provider_model, 'kling-v2-master');
    const [prepared] = await w.tdb.database.db
      .select()
      .from(taskTransition)
      .where(eq(taskTransition.task_id, taskId))
      .orderBy(asc(taskTransition.to_version))
      .then((rows) => rows.filter((r) => r.to_status === 'SUBMITTING'));
    assert.deepEqual((prepared!.detail as { route: unknown }).route, { via: 'scored', reason: 'best-score' });
  });

  test('the tenant preference moves the choice within the family', async () => {
    const taskId = await familyTask({ provider: 'replicate' });
    await run('prepareAttempt', taskId);
    const [a1] = await attemptsOf(taskId);
    assert.equal(a1!.provider, 'replicate');
    assert.equal(a1!.provider_model, 'kwaivgi/kling-v2.0');
  });

  test('an outcome that was unknown pins the task to its provider, even after it was proved absent', async () => {
    const taskId = await familyTask();
    await run('prepareAttempt', taskId);
    assert.equal((await attemptsOf(taskId))[0]!.provider, 'kling');
    // A 500 after the request was sent: unknown. The simulator created nothing.
    w.sim.sim.setFaults({ providers: ['kling'], submit: 'error_5xx_before_accept' });
    const r1 = await run('submitAttempt', taskId);
    assert.equal(r1.facts.status, 'SUBMIT_UNKNOWN');
    // A provider whose lookup miss were proof (Kling's is not: docs/providers.md): the task is free
    // for a new attempt once the claim's send-by moment has passed.
    await new Promise((r) => setTimeout(r, 350));
    const polled = await runActivity(freshActivities(w, { kling: provingAbsence(w.deps.providers['kling']!) }), 'pollProvider', taskId);
    assert.equal(polled.result, 'absent');
    await run('prepareAttempt', taskId);
    const [a1, a2] = await attemptsOf(taskId);
    assert.equal(a1!.submit_state, 'REJECTED');
    assert.equal(a2!.provider, 'kling', 'never re-routed after an unknown outcome');
    const counts = w.deps.routeStats.decisionCounts();
    assert.ok(
      counts.some((c) => c.provider === 'kling' && c.via === 'pinned' && c.reason === 'outcome-unknown'),
      JSON.stringify(counts),
    );
  });
  test('a proven rejection (429, no job) fails over to the next compatible provider, which takes the job', async () => {
    const taskId = await familyTask();
    await run('prepareAttempt', taskId);
    w.sim.sim.setFaults({ providers: ['kling'], submit: 'rate_limit', retry_after_s: 1 });
    const r1 = await run('submitAttempt', taskId);
    assert.equal(r1.facts.status, 'DISPATCHING');
    const facts = await run('prepareAttempt', taskId);
    assert.equal(facts.status, 'SUBMITTING');
    const r2 = await run('submitAttempt', taskId);
    assert.equal(r2.facts.status, 'SUBMITTED');
    const [a1, a2] = await attemptsOf(taskId);
    assert.equal(a1!.provider, 'kling');
    assert.equal(a1!.submit_state, 'REJECTED');
    assert.equal(a2!.provider, 'fal', 'failed over to fal');
    assert.equal(a2!.submit_state, 'SUBMITTED');
    assert.equal(w.sim.jobsFor(a1!.attempt_id), 0, 'kling created no job');
    assert.equal(w.sim.jobsFor(a2!.attempt_id), 1, 'one job, at fal');
    const task = await taskOf(taskId);
    assert.equal(task.provider, 'fal', 'the task names the provider of its active attempt');
  });
});

describe('routeNextAttempt (pure)', () => {
  const task = (extra: Record<string, unknown> = {}) => ({
    taskId: '7d7a3f7e-52d8-4a8b-9b1a-0a3c2f1d9e01',
    request: { model: 'kling-v2', prompt: 'x', duration_seconds: 5, resolution: '720p', ...extra },
    provider: 'kling',
    providerModel: 'kling-v2-master',
  });
  const all = ['replicate', 'fal', 'runway', 'kling'];
  const healthy: Record<string, ProviderHealth> = {
    kling: { errorRate: 0, p95LatencyMs: 800, breaker: 'closed' },
    fal: { errorRate: 0, p95LatencyMs: 800, breaker: 'closed' },
    replicate: { errorRate: 0, p95LatencyMs: 800, breaker: 'closed' },
  };
  const opts = { available: all, maxAttempts: 3, health: healthy, ...testRouting() };
  const attempt = (n: number, provider: string, state: string, unknown = false): AttemptRecord => ({
    attempt_no: n,
    provider,
    submit_state: state,
    unknown_since: unknown ? new Date() : null,
  });

  test('an unhealthy provider loses to a healthy one; an open breaker is never chosen', () => {
    const sick = { ...healthy, kling: { errorRate: 0.9, p95LatencyMs: 800, breaker: 'closed' as const } };
    assert.equal((routeNextAttempt(task(), [], { ...opts, health: sick }) as { provider: string }).provider, 'fal');
    const open = { ...healthy, kling: { errorRate: 0, p95LatencyMs: 800, breaker: 'open' as const } };
    assert.equal((routeNextAttempt(task(), [], { ...opts, health: open }) as { provider: string }).provider, 'fal');
  });

  test('an input image leaves out the providers that cannot take one', () => {
    const r = routeNextAttempt(task({ input_image_url: 'https://example.com/a.png' }), [attempt(1, 'kling', 'REJECTED')], opts);
    assert.equal(r.kind === 'route' && r.provider, 'replicate', 'fal takes no image; kling rejected already');
  });

  test('only configured providers are candidates; one left makes the route pinned', () => {
    const r = routeNextAttempt(task(), [], { ...opts, available: ['replicate'] });
    assert.deepEqual(r, { kind: 'route', provider: 'replicate', model: 'kwaivgi/kling-v2.0', via: 'pinned', reason: 'single-route' });
  });

  test('a route held after a breaking schema change is never chosen; with none left the task gets no route', () => {
    const held = new Set(['kling kling-v2-master', 'fal fal-ai/kling-video/v2/master/text-to-video']);
    const r = routeNextAttempt(task(), [], { ...opts, held });
    assert.deepEqual(r, { kind: 'route', provider: 'replicate', model: 'kwaivgi/kling-v2.0', via: 'pinned', reason: 'single-route' });
    const none = routeNextAttempt(task(), [], { ...opts, held: new Set([...held, 'replicate kwaivgi/kling-v2.0']) });
    assert.equal(none.kind, 'rejected');
  });

  test('once every compatible provider rejected, the family is tried again rather than given up early', () => {
    const r = routeNextAttempt(task(), [attempt(1, 'kling', 'REJECTED'), attempt(2, 'fal', 'REJECTED')], {
      ...opts,
      maxAttempts: 5,
      available: ['kling', 'fal'],
    });
    assert.equal(r.kind, 'route');
  });

  test('a slow scorer falls back to the static route (lowest priority), and says so', () => {
    let t = 0;
    const r = routeNextAttempt(task(), [], { ...opts, now: () => (t += 10), settings: { budgetMs: 5, staticRoute: 'priority' } });
    assert.deepEqual(r, { kind: 'route', provider: 'kling', model: 'kling-v2-master', via: 'fallback', reason: 'budget-exceeded' });
  });

  test('a job that exists, or an outcome still unknown, keeps the provider', () => {
    for (const h of [[attempt(1, 'fal', 'SUBMIT_UNKNOWN')], [attempt(1, 'fal', 'SUBMITTING')], [attempt(1, 'fal', 'REJECTED', true)]]) {
      const r = routeNextAttempt(task(), h, opts);
      assert.equal(r.kind === 'route' && r.provider, 'fal');
      assert.equal(r.kind === 'route' && r.via, 'pinned');
    }
  });

  test('a pinned model never leaves its provider', () => {
    const r = routeNextAttempt(
      { ...task({ model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' }), provider: 'replicate', providerModel: 'minimax/video-01' },
      [attempt(1, 'replicate', 'REJECTED')],
      opts,
    );
    assert.deepEqual(r, { kind: 'route', provider: 'replicate', model: 'minimax/video-01', via: 'pinned', reason: 'single-route' });
  });

  test('the router never chooses a route that cannot deliver the request exactly, whatever the health and the preference; what no route delivers is rejected', () => {
    const favour = (provider: string): Record<string, ProviderHealth> => ({
      ...Object.fromEntries(all.map((p) => [p, { errorRate: 0.5, p95LatencyMs: 60_000, breaker: 'closed' as const }])),
      [provider]: { errorRate: 0, p95LatencyMs: 10, breaker: 'closed' },
    });
    const wrong: string[] = [];
    for (const entry of MODEL_CATALOG) {
      for (const resolution of RESOLUTIONS) {
        for (let seconds = 1; seconds <= 20; seconds++) {
          for (const image of [undefined, 'https://example.com/a.png']) {
            for (const prompt of ['a heron', 'x'.repeat(1001)]) {
              const req = { model: entry.model, prompt, duration_seconds: seconds, resolution, input_image_url: image };
              for (const provider of all) {
                const r = routeNextAttempt(
                  { taskId: task().taskId, request: { ...req, provider }, provider: entry.routes[0]!.provider, providerModel: entry.routes[0]!.model },
                  [],
                  { ...opts, health: favour(provider) },
                );
                const what = `${entry.model} ${resolution} ${seconds}s${image ? ' +image' : ''} ${prompt.length} chars, ${provider} favoured`;
                if (r.kind === 'rejected') {
                  if (!requestRefusal(entry, req)) wrong.push(`${what}: rejected, though the catalog admits it`);
                  continue;
                }
                const route = entry.routes.find((x) => x.provider === r.provider && x.model === r.model);
                if (!route) wrong.push(`${what}: routed to ${r.provider} ${r.model}, not a route of the entry`);
                else if (routeRefusal(route, req)) wrong.push(`${what}: routed to ${r.provider}, which ${routeRefusal(route, req)!.message}`);
              }
            }
          }
        }
      }
    }
    assert.deepEqual(wrong.slice(0, 10), []);
  });
});
