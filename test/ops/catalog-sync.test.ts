// `ops catalog sync` against the simulator, run as an operator would (node --import tsx
// ops/cli.ts): the published schemas are read from the providers' schema endpoints, recorded on
// confirmation (audited), and a change that breaks what the catalog sends holds the route, so a
// create for it is refused (a pinned model) or goes to another route (a family) until `ops
// catalog enable`; an additive change is recorded and holds nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { configToEnv } from '../../config/env';
import { acquireFence } from '../../db/fence';
import { heldRoutes } from '../../db/catalog-routes';
import { catalogSchemaRevision, opsAudit } from '../../db/schema';
import { findModel, routeKey, routerCatalog, withoutHeldRoutes } from '../../domain/catalog';
import { runNodeScript } from '../../harness';
import { HttpProblem } from '../../api/problem';
import { InputSchemas } from '../../providers/simulator/input-schemas';
import { startHarness, type Harness } from '../providers/harness';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const FAL = 'fal-ai/kling-video/v2/master/text-to-video';
const published = new InputSchemas();
let tdb: TestDatabase;
let h: Harness;
let env: Record<string, string>;

before(async () => {
  const config = testConfig();
  tdb = await createTestDatabase(config);
  h = await startHarness({ apiToken: config.PROVIDER_REPLICATE_API_TOKEN });
  env = {
    ...configToEnv(config),
    DATABASE_URL: tdb.url,
    OPS_OPERATOR: 'carol',
    LOG_LEVEL: 'warn',
    PROVIDER_REPLICATE_BASE_URL: `${h.sim.baseUrl()}/replicate`,
    PROVIDER_FAL_OPENAPI_URL: `${h.sim.baseUrl()}/fal/api/openapi/queue/openapi.json`,
  };
});
after(async () => {
  await h?.close();
  await tdb?.drop();
});

async function ops(...args: string[]) {
  const r = await runNodeScript('ops/cli.ts', ['catalog', ...args], env, { timeoutMs: 90_000 });
  return { ...r, json: () => JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') };
}
const db = () => tdb.database.db;
const audits = async (action: string) => db().select().from(opsAudit).where(eq(opsAudit.action, action));
const revisions = async (model: string) => db().select().from(catalogSchemaRevision).where(eq(catalogSchemaRevision.model, model));

let seq = 0;
async function create(tenantId: string, body: Record<string, unknown>) {
  const config = testConfig();
  const { token } = await acquireFence(db(), config.FENCE_SCOPE, config.REGION);
  return createTask(db(), token, { tenantId, idempotencyKey: `catalog-sync-${++seq}`, body: { prompt: 'a heron at dawn', priority: 0, ...body } as never });
}
const minimax = { model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' };

test('the first sync shows every model unrecorded and skips Runway and Kling by name; --apply needs a confirmation, --yes records each with an audit row', async () => {
  const first = await ops('sync', '--json');
  assert.equal(first.code, 0, first.stderr);
  const models = first.json().models as { provider: string; model: string; status: string; note?: string; breaks: string[] }[];
  assert.deepEqual(
    models.filter((m) => m.provider === 'replicate' || m.provider === 'fal').map((m) => [m.model, m.status, m.breaks]),
    [
      ['minimax/video-01', 'unrecorded', []],
      ['kwaivgi/kling-v2.1', 'unrecorded', []],
      ['luma/ray-2-720p', 'unrecorded', []],
      [FAL, 'unrecorded', []],
      ['kwaivgi/kling-v2.0', 'unrecorded', []],
    ],
  );
  for (const m of models.filter((x) => x.provider === 'runway' || x.provider === 'kling')) {
    assert.equal(m.status, 'skipped');
    assert.match(m.note ?? '', /publishes no machine-readable model schema/);
  }
  // Not a terminal and no --yes: nothing is recorded.
  const unconfirmed = await ops('sync', '--apply');
  assert.notEqual(unconfirmed.code, 0);
  assert.match(unconfirmed.stderr, /pass --yes/);
  assert.equal((await revisions('minimax/video-01')).length, 0);

  const applied = await ops('sync', '--apply', '--yes', '--json');
  assert.equal(applied.code, 0, applied.stderr);
  assert.equal(applied.json().applied.length, 5);
  const [rev] = await revisions('minimax/video-01');
  assert.deepEqual(rev?.input_schema, published.schema('replicate', 'minimax/video-01', 'input'));
  assert.equal(rev?.recorded_by, 'operator:carol');
  assert.equal((await audits('catalog.record')).length, 5);
  assert.equal((await heldRoutes(db())).size, 0);

  const again = await ops('sync');
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /replicate minimax\/video-01 \(minimax\/video-01\): up to date/);
  assert.match(again.stdout, /catalog up to date/);
});

test('a new required input is shown by name, held on --apply (audited): the pinned model is refused before any reservation, until ops catalog enable', async () => {
  const { tenantId } = await createTestTenant(tdb.database, testConfig(), '100');
  const input = published.schema('replicate', 'minimax/video-01', 'input') as { required: string[]; properties: object };
  h.sim.setModelSchema('replicate', 'minimax/video-01', {
    ...input,
    required: [...input.required, 'style'],
    properties: { ...input.properties, style: { type: 'string', enum: ['cinematic', 'anime'] } },
  });
  const shown = await ops('sync', '--provider', 'replicate');
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /minimax\/video-01 \(minimax\/video-01\): BREAKING/);
  assert.match(shown.stdout, /input\.style: input-added required string/);
  assert.match(shown.stdout, /! input\.style: must have required property 'style'/);
  assert.match(shown.stdout, /kwaivgi\/kling-v2.1 \(kwaivgi\/kling-v2.1\): up to date/);
  assert.equal((await heldRoutes(db())).size, 0, 'shown, not applied');

  const applied = await ops('sync', '--provider', 'replicate', '--apply', '--yes', '--json');
  assert.equal(applied.code, 0, applied.stderr);
  assert.deepEqual(
    applied.json().applied.map((a: { model: string; held: boolean }) => [a.model, a.held]),
    [['minimax/video-01', true]],
  );
  const held = await heldRoutes(db());
  assert.deepEqual([...held.keys()], [routeKey('replicate', 'minimax/video-01')]);
  const [hold] = await audits('catalog.hold');
  assert.equal(hold?.target_id, 'replicate minimax/video-01');
  assert.match(hold?.reason ?? '', /input\.style/);

  const refused = await create(tenantId, minimax).catch((e: unknown) => e);
  assert.ok(refused instanceof HttpProblem);
  assert.equal(refused.status, 400);
  assert.deepEqual(
    refused.errors.map((e) => e.field),
    ['model'],
  );
  assert.match(refused.message, /unavailable/);

  const enabled = await ops('enable', 'replicate', 'minimax/video-01', '--reason', 'builder sends style now', '--json');
  assert.equal(enabled.code, 0, enabled.stderr);
  assert.equal((await audits('catalog.enable'))[0]?.reason, 'builder sends style now');
  assert.equal((await heldRoutes(db())).size, 0);
  assert.equal((await create(tenantId, minimax)).kind, 'created');
  h.sim.restoreModelSchemas();
});

test("a held route of a family is left out: the family's other routes take the request; an additive change is recorded and holds nothing", async () => {
  const { tenantId } = await createTestTenant(tdb.database, testConfig(), '100');
  const fal = published.schema('fal', FAL, 'input') as { properties: Record<string, unknown> };
  // Additive: a new optional input.
  h.sim.setModelSchema('fal', FAL, { ...fal, properties: { ...fal.properties, seed: { type: 'integer' } } });
  const additive = await ops('sync', '--provider', 'fal', '--apply', '--yes');
  assert.equal(additive.code, 0, additive.stderr);
  assert.match(additive.stdout, /changed \(additive/);
  assert.match(additive.stdout, /input\.seed: input-added optional integer/);
  assert.equal((await heldRoutes(db())).size, 0);
  assert.equal((await revisions(FAL)).length, 2);

  // Breaking: the duration we sell ("10") is no longer taken.
  const duration = fal.properties['duration'] as object;
  h.sim.setModelSchema('fal', FAL, { ...fal, properties: { ...fal.properties, duration: { ...duration, enum: ['5'] } } });
  const breaking = await ops('sync', '--provider', 'fal', '--apply', '--yes');
  assert.equal(breaking.code, 0, breaking.stderr);
  assert.match(breaking.stdout, /input\.duration: enum-removed no longer "10"/);
  const held = await heldRoutes(db());
  assert.ok(held.has(routeKey('fal', FAL)));

  // The pinned fal model is refused; the kling-v2 family goes on without its fal route.
  await assert.rejects(create(tenantId, { model: FAL, duration_seconds: 5, resolution: '720p' }), (e: unknown) => e instanceof HttpProblem && e.status === 400);
  const family = await create(tenantId, { model: 'kling-v2', duration_seconds: 10, resolution: '720p' });
  assert.equal(family.kind, 'created');
  const entry = findModel('kling-v2');
  assert.ok(entry);
  assert.deepEqual(
    withoutHeldRoutes(entry, held).routes.map((r) => r.provider),
    ['kling', 'replicate'],
  );
  assert.deepEqual(
    routerCatalog(['kling', 'fal', 'replicate'], held)['kling-v2']?.map((r) => r.provider),
    ['kling', 'replicate'],
  );
  h.sim.restoreModelSchemas();
});
