// What each catalog entry can be ordered as, over the task API against real Postgres and a real
// Temporal server (no worker polls this file's task queue): every resolution, duration and image of
// the create body's range is either accepted and reserved at the entry's price, or refused with a
// 400 problem+json naming the field and what the model accepts, before any credit is reserved.
// The table below is written from the models' published inputs (docs/providers.md "Model input
// schemas"), not from the catalog, so a catalog that sells what a model cannot deliver fails here.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { creditAccount, creditLedger, generationTask } from '../../db/schema';
import { MODEL_CATALOG, priceFor, RESOLUTIONS, findModel, type Resolution } from '../../domain/catalog';
import { addMoney } from '../../domain/money';
import {
  createTestDatabase,
  createTestTenant,
  http,
  startApi,
  temporalClient,
  testConfig,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('catalog-admission') });
const IMAGE = 'https://images.example.com/first-frame.png';
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** What each entry's model delivers: its resolutions, durations and first-frame rule. */
const ACCEPTS: Record<string, { resolutions: Resolution[]; durations: number[]; image: 'none' | 'optional' | 'required' }> = {
  // No resolution or duration input: 6 s at 720p.
  'minimax/video-01': { resolutions: ['720p'], durations: [6], image: 'optional' },
  // start_image required; mode standard 720p, pro 1080p; 5 or 10 s.
  'kwaivgi/kling-v2.1': { resolutions: ['720p', '1080p'], durations: [5, 10], image: 'required' },
  'luma/ray-2-720p': { resolutions: ['720p'], durations: [5, 9], image: 'optional' },
  'fal-ai/kling-video/v2/master/text-to-video': { resolutions: ['720p'], durations: [5, 10], image: 'none' },
  gen4_turbo: { resolutions: ['720p'], durations: range(2, 10), image: 'required' },
  'gen4.5': { resolutions: ['720p'], durations: range(2, 10), image: 'optional' },
  'veo3.1': { resolutions: ['720p', '1080p'], durations: [4, 6, 8], image: 'optional' },
  // Kling's own text2video: no std/pro on v2-master, 720p, 5 or 10 s, no image.
  'kling-v2-master': { resolutions: ['720p'], durations: [5, 10], image: 'none' },
  // The family: Kling and fal take text, Replicate's kling-v2.0 a first frame too.
  'kling-v2': { resolutions: ['720p'], durations: [5, 10], image: 'optional' },
};

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

test('the table covers every catalog entry', () => {
  assert.deepEqual(MODEL_CATALOG.map((m) => m.model).sort(), Object.keys(ACCEPTS).sort());
});

/** The field a request outside the model is refused on: the first of resolution, duration, image. */
function refusedField(a: (typeof ACCEPTS)[string], resolution: Resolution, seconds: number, image: boolean): string | null {
  if (!a.resolutions.includes(resolution)) return 'resolution';
  if (!a.durations.includes(seconds)) return 'duration_seconds';
  if (image ? a.image === 'none' : a.image === 'required') return 'input_image_url';
  return null;
}

for (const [model, accepts] of Object.entries(ACCEPTS)) {
  test(`${model}: each resolution, duration (1–20 s) and image is accepted at its price, or refused with 400 naming the field before any reservation`, async () => {
    const entry = findModel(model);
    assert.ok(entry, `${model} is in the catalog`);
    const tenant = await createTestTenant(tdb.database, config, '100000');
    let reserved = '0';
    let accepted = 0;
    const problems: string[] = [];
    for (const resolution of RESOLUTIONS) {
      for (const seconds of range(1, 20)) {
        for (const image of [false, true]) {
          const body = { model, prompt: 'a kingfisher diving', duration_seconds: seconds, resolution, ...(image ? { input_image_url: IMAGE } : {}) };
          const what = `${resolution} ${seconds}s${image ? ' +image' : ''}`;
          const res = await http(api.baseUrl, 'POST', '/v1/tasks', {
            apiKey: tenant.apiKey,
            body,
            headers: { 'idempotency-key': `${model}-${what}`.replace(/ /g, '_') },
          });
          const field = refusedField(accepts, resolution, seconds, image);
          if (field === null) {
            if (res.status !== 202) problems.push(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
            else {
              accepted++;
              reserved = addMoney(reserved, priceFor(entry, resolution, seconds));
            }
            continue;
          }
          if (res.status !== 400) {
            problems.push(`${what}: ${res.status}, expected 400 on ${field}`);
            continue;
          }
          if (!/application\/problem\+json/.test(res.headers.get('content-type') ?? '')) problems.push(`${what}: not problem+json`);
          const error = (res.body.errors as { field: string; message: string }[])[0];
          if (error?.field !== field) problems.push(`${what}: refused on ${error?.field}, expected ${field}`);
          // The message says what the model accepts.
          const named = field === 'resolution' ? accepts.resolutions : field === 'duration_seconds' ? accepts.durations.map(String) : ['input image'];
          if (!named.every((v) => error?.message.includes(v))) problems.push(`${what}: "${error?.message}" does not name ${named.join(', ')}`);
        }
      }
    }
    assert.deepEqual(problems, []);
    assert.ok(accepted > 0, 'some request is accepted');
    // Only the accepted tasks exist and hold credits: no refusal reserved anything.
    const tasks = await tdb.database.db.select().from(generationTask).where(eq(generationTask.tenant_id, tenant.tenantId));
    assert.equal(tasks.length, accepted);
    const reserves = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.tenant_id, tenant.tenantId));
    assert.equal(reserves.filter((e) => e.entry_type === 'RESERVE').length, accepted);
    const [account] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, tenant.tenantId));
    assert.equal(Number(account!.reserved), Number(reserved));
    assert.equal(Number(account!.balance), 100000);
  });
}
