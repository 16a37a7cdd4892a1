// Replicate's contract, from both sides. The official `replicate` SDK (a client no one here
// wrote) is pointed at the simulator: the simulator accepts what it sends and answers in shapes it
// parses. And every request our adapter can send is checked against the published request shapes
// (test/providers/fixtures/replicate-api.ts), and every prediction the simulator serves carries
// only documented fields.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import Replicate, { type Prediction } from 'replicate';
import { MODEL_CATALOG } from '../../domain/catalog';
import { createReplicateAdapter, replicateCreateBody, replicatePredictionSchema, replicateTarget } from '../../providers/replicate';
import type { SubmitRequest } from '../../providers/types';
import { contractProblems, recordingFetch, type RecordedRequest } from './fixtures/contract';
import { LIST_PAGE_FIELDS, PREDICTION_FIELDS, PREDICTION_STATUSES, REPLICATE_ENDPOINTS } from './fixtures/replicate-api';
import { admittedInputs, lookupQuery, newAttempt, startHarness, waitFor, type Harness } from './harness';

const TOKEN = 'r8_contract_token_0123456789';
const SECRET = `whsec_${Buffer.from('contract-secret-0123456789abcdef').toString('base64')}`;
const VERSION = `acme/video:${'ab12'.repeat(16)}`;
let h: Harness;

before(async () => {
  h = await startHarness({ apiToken: TOKEN, webhookSecret: SECRET, listPageSize: 3 });
});
after(() => h.close());
beforeEach(() => {
  h.sim.reset();
  h.sim.clearFaults();
});

const sdk = () => new Replicate({ auth: TOKEN, baseUrl: `${h.sim.baseUrl()}/replicate/v1` });
const undocumented = (o: object, fields: readonly string[]) => Object.keys(o).filter((k) => !fields.includes(k));

/** A prediction as served: only documented fields, a documented status, and our parser reads it. */
function assertDocumented(p: object): void {
  assert.deepEqual(undocumented(p, PREDICTION_FIELDS), [], `undocumented fields in ${JSON.stringify(p)}`);
  assert.ok(PREDICTION_STATUSES.includes((p as Prediction).status));
  assert.ok(replicatePredictionSchema.safeParse(p).success);
}

test('the official SDK against the simulator: predictions.create (model and version), get, list (paginated), cancel', async () => {
  const r = sdk();
  const webhook = `${h.receiverUrl}/v1/callbacks/replicate/sdk-1`;
  const byModel = await r.predictions.create({ model: 'acme/video', input: { prompt: 'sdk model' }, webhook, webhook_events_filter: ['start', 'completed'] });
  const byVersion = await r.predictions.create({ version: VERSION, input: { prompt: 'sdk version' } });
  for (const p of [byModel, byVersion]) assertDocumented(p);
  assert.deepEqual([byModel.model, byModel.status, byVersion.version], ['acme/video', 'starting', VERSION.split(':')[1]]);

  const got = await r.predictions.get(byModel.id);
  assertDocumented(got);
  assert.deepEqual(got.input, { prompt: 'sdk model' });
  assert.equal(got.urls.get, `${h.sim.baseUrl()}/replicate/v1/predictions/${byModel.id}`);

  for (let i = 0; i < 4; i++) await r.predictions.create({ model: 'acme/video', input: { prompt: `page ${i}` } });
  const first = await r.predictions.list();
  assert.deepEqual(undocumented(first, LIST_PAGE_FIELDS), []);
  const seen: string[] = [];
  for await (const page of r.paginate(() => r.predictions.list())) {
    for (const p of page) {
      assertDocumented(p);
      seen.push(p.id);
    }
  }
  assert.equal(seen.length, 6);
  assert.ok(seen.includes(byModel.id) && seen.includes(byVersion.id));

  const canceled = await r.predictions.cancel(byVersion.id);
  assertDocumented(canceled);
  assert.equal(canceled.status, 'canceled');
});

test('`version: "owner/name"` runs the official model (its latest version) as the reference allows; a version on the model endpoint is refused', async () => {
  const r = sdk();
  const official = await r.predictions.create({ version: 'acme/video', input: { prompt: 'official by version' } });
  assertDocumented(official);
  assert.equal(official.model, 'acme/video');
  assert.match(official.version, /^[0-9a-f]{64}$/);
  // A catalog model named so is held to its published input, as on its own endpoint.
  await assert.rejects(r.predictions.create({ version: 'kwaivgi/kling-v2.1', input: { prompt: 'no start image' } }), /422/);
  await assert.rejects(r.predictions.create({ version: 'not a model', input: {} }), /422/);
  const res = await fetch(`${h.sim.baseUrl()}/replicate/v1/models/acme/video/predictions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ version: VERSION, input: {} }),
  });
  assert.equal(res.status, 422);
});

test('our create bodies satisfy the SDK request type', () => {
  const req: SubmitRequest = { attemptId: 'a', model: 'acme/video', input: { prompt: 'x' }, webhookUrl: 'https://api.example.com/v1/callbacks/replicate/a' };
  // Type-checked by `npm run check`: the SDK's own create options accept our bodies.
  const official: Parameters<Replicate['predictions']['create']>[0] = { ...replicateCreateBody(req, null), model: req.model };
  const versioned: Parameters<Replicate['predictions']['create']>[0] = { ...replicateCreateBody(req, VERSION), version: VERSION };
  assert.equal(official.model, 'acme/video');
  assert.equal(versioned.version, VERSION);
});

test('every request the adapter can send matches the documented request shapes (paths, methods, required fields, enums)', async () => {
  // Webhooks would go to api.example.com: none leaves this machine.
  h.sim.setFaults({ callbacks: 'off' });
  const calls: RecordedRequest[] = [];
  const adapter = createReplicateAdapter({
    baseUrl: `${h.sim.baseUrl()}/replicate`,
    apiToken: TOKEN,
    webhookSecret: SECRET,
    timeoutMs: 2_000,
    fetch: recordingFetch(calls),
  });
  // Every Replicate model of the catalog (with a request its route admits), and a versioned one.
  const routes = MODEL_CATALOG.flatMap((m) => m.routes).filter((r) => r.provider === 'replicate');
  const inputs = new Map<string, Record<string, unknown>>(routes.map((r) => [r.model, admittedInputs(r)[0]!]));
  inputs.set(VERSION, { duration: 5, resolution: '720p' });
  const models = [...inputs.keys()];
  const jobs: string[] = [];
  for (const model of models) {
    const a = newAttempt('https://api.example.com', 'replicate');
    const input = { ...inputs.get(model), prompt: `contract ${model}` };
    const out = await adapter.submit({ ...a, model, input });
    assert.equal(out.kind, 'accepted', `${model}: ${JSON.stringify(out)}`);
    if (out.kind !== 'accepted') continue;
    jobs.push(out.job.jobId);
    assert.equal(calls.at(-1)!.url.pathname, `/replicate${replicateTarget(model).path}`);
  }
  for (const id of jobs) await adapter.getJob(id);
  await adapter.cancel(jobs[0]!);
  // A lookup over several pages (page size 3) follows `next` with its cursor.
  const found = await adapter.findByCorrelationToken(
    lookupQuery('t', { model: models[0]!, input: { ...inputs.get(models[0]!), prompt: `contract ${models[0]}` } }),
  );
  assert.equal(found.kind, 'found');
  assert.ok(calls.filter((c) => c.method === 'GET' && c.url.pathname.endsWith('/v1/predictions')).length >= 2, 'the walk took several pages');

  for (const c of calls) {
    assert.deepEqual(contractProblems(REPLICATE_ENDPOINTS, '/replicate', c), []);
    assert.equal(c.headers['authorization'], `Bearer ${TOKEN}`);
  }
  // And every prediction the simulator served along the way carries documented fields only.
  const served = await waitFor('a terminal job', async () => {
    const res = await fetch(`${h.sim.baseUrl()}/replicate/v1/predictions/${jobs[1]}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const p = (await res.json()) as Prediction;
    return p.status === 'succeeded' ? p : undefined;
  });
  assertDocumented(served);
});
