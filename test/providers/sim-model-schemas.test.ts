// The simulator's schema endpoints serve the schemas it validates a create against (Replicate's
// model and version endpoints, fal's per-endpoint OpenAPI), a test knob changes a model's schema
// for both at once, and a Replicate prediction's data is removed an hour (here: a shortened
// window) after it finishes, as Replicate documents.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { InputSchemas } from '../../providers/simulator/input-schemas';
import { startHarness, waitFor, type Harness } from './harness';

const TOKEN = 'r8_unused_in_these_tests';
const published = new InputSchemas();
let h: Harness;

before(async () => {
  h = await startHarness({ replicateDataRetentionMs: 400 });
  h.sim.setFaults({ callbacks: 'off' });
});
after(() => h?.close());
beforeEach(() => h.sim.reset());

const get = async (path: string, auth = true) => {
  const res = await fetch(`${h.sim.baseUrl()}${path}`, { headers: auth ? { authorization: `Bearer ${TOKEN}` } : {} });
  return { status: res.status, json: (await res.json()) as any };
};
const create = async (model: string, input: Record<string, unknown>) => {
  const res = await fetch(`${h.sim.baseUrl()}/replicate/v1/models/${model}/predictions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ input }),
  });
  return { status: res.status, json: (await res.json()) as any };
};

test('Replicate GET /v1/models/{owner}/{name} and its version serve the input schema the simulator validates against', async () => {
  const model = await get('/replicate/v1/models/minimax/video-01');
  assert.equal(model.status, 200);
  const v = model.json.latest_version;
  assert.match(v.id, /^[0-9a-f]{64}$/);
  assert.deepEqual(v.openapi_schema.components.schemas.Input, published.schema('replicate', 'minimax/video-01', 'input'));
  const version = await get(`/replicate/v1/models/minimax/video-01/versions/${v.id}`);
  assert.deepEqual(version.json, v);
  assert.equal((await get('/replicate/v1/models/minimax/video-01')).status, 200);
  assert.equal((await get('/replicate/v1/models/nobody/nothing')).status, 404);
  assert.equal((await get('/replicate/v1/models/minimax/video-01', false)).status, 401);
});

test('the schema knob changes what the model publishes (a new version) and what it refuses; reset restores it', async () => {
  const before = (await get('/replicate/v1/models/minimax/video-01')).json.latest_version;
  assert.equal((await create('minimax/video-01', { prompt: 'a heron' })).status, 201);
  const input = published.schema('replicate', 'minimax/video-01', 'input') as { required: string[]; properties: object };
  const changed = { ...input, required: [...input.required, 'style'], properties: { ...input.properties, style: { type: 'string' } } };
  h.sim.setModelSchema('replicate', 'minimax/video-01', changed);
  const after = (await get('/replicate/v1/models/minimax/video-01')).json.latest_version;
  assert.notEqual(after.id, before.id);
  assert.deepEqual(after.openapi_schema.components.schemas.Input, changed);
  assert.equal((await get(`/replicate/v1/models/minimax/video-01/versions/${before.id}`)).status, 404);
  const refused = await create('minimax/video-01', { prompt: 'a heron' });
  assert.equal(refused.status, 422);
  assert.deepEqual(
    refused.json.invalid_fields.map((f: { field: string }) => f.field),
    ['input.style'],
  );
  h.sim.reset();
  assert.equal((await get('/replicate/v1/models/minimax/video-01')).json.latest_version.id, before.id);
  assert.equal((await create('minimax/video-01', { prompt: 'a heron' })).status, 201);
});

test("fal's per-endpoint OpenAPI document (public) holds the endpoint's input schema, knob included", async () => {
  const endpoint = 'fal-ai/kling-video/v2/master/text-to-video';
  const doc = await get(`/fal/api/openapi/queue/openapi.json?endpoint_id=${encodeURIComponent(endpoint)}`, false);
  assert.equal(doc.status, 200);
  const ref: string = doc.json.paths[`/${endpoint}`].post.requestBody.content['application/json'].schema.$ref;
  const name = ref.replace('#/components/schemas/', '');
  const { title: _title, ...schema } = doc.json.components.schemas[name];
  const { title: _t, ...fixture } = published.schema('fal', endpoint, 'input') as { title?: string };
  assert.deepEqual(schema, fixture);
  const knob = await fetch(`${h.sim.baseUrl()}/_sim/schemas`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ provider: 'fal', model: endpoint, schema: { type: 'object', required: ['prompt'], properties: { prompt: { type: 'string' } } } }),
  });
  assert.equal(knob.status, 200);
  const changed = await get(`/fal/api/openapi/queue/openapi.json?endpoint_id=${encodeURIComponent(endpoint)}`, false);
  assert.deepEqual(Object.keys(changed.json.components.schemas[name].properties), ['prompt']);
  assert.equal((await get('/fal/api/openapi/queue/openapi.json?endpoint_id=fal-ai/none', false)).status, 404);
});

test('a finished prediction keeps its output for the retention window, then reads data_removed with no input, output or file', async () => {
  const created = await create('acme/video', { prompt: 'kept an hour', duration: 1 });
  assert.equal(created.status, 201);
  const done = await waitFor('the prediction to succeed', async () => {
    const p = (await get(`/replicate/v1/predictions/${created.json.id}`)).json;
    return p.status === 'succeeded' ? p : undefined;
  });
  assert.equal(done.data_removed, false);
  assert.equal(typeof done.output, 'string');
  assert.equal((await fetch(done.output)).status, 200);
  const removed = await waitFor('its data to be removed', async () => {
    const p = (await get(`/replicate/v1/predictions/${created.json.id}`)).json;
    return p.data_removed ? p : undefined;
  });
  assert.deepEqual([removed.status, removed.output, removed.input, removed.logs], ['succeeded', null, {}, '']);
  assert.equal((await fetch(done.output)).status, 404);
});
