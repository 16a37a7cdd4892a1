// Every request the product can send, held to the model's published input schema
// (test/fixtures/provider-schemas/, docs/providers.md "Model input schemas"): for each catalog
// route, each resolution, duration and image the route admits is built by the real request builder
// and must validate against the fixture, name no input the model does not publish, and ask for
// exactly the resolution, duration and image ordered. What a route refuses, its builder refuses too,
// and the simulator refuses what a schema refuses, as each provider answers a bad input.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { providerInput } from '../../activities/provider-input';
import { MODEL_CATALOG, RESOLUTIONS, routeRefusal, type ProviderRoute, type RouteRequest } from '../../domain/catalog';
import { falInput } from '../../providers/fal';
import { klingRequest } from '../../providers/kling';
import { signKlingJwt } from '../../providers/kling-jwt';
import { replicateInput } from '../../providers/replicate-input';
import { runwayRequest } from '../../providers/runway';
import { InputSchemas, type Delivered, type ProviderSchemaFixture } from '../../providers/simulator/input-schemas';
import { SIM_FAL_DEFAULTS } from '../../providers/simulator/fal';
import { SIM_KLING_DEFAULTS } from '../../providers/simulator/kling';
import { SIM_RUNWAY_DEFAULTS } from '../../providers/simulator/runway';
import { startHarness, type Harness } from './harness';

const schemas = new InputSchemas();
const IMAGE = 'https://example.com/first-frame.png';

/** What the product sends for a request on a route: the endpoint (schema key) and the body, or the builder's refusal. */
type Built = { readonly endpoint: string; readonly body: Record<string, unknown> } | { readonly refused: { readonly field: string; readonly message: string } };

function build(route: ProviderRoute, req: RouteRequest): Built {
  const input = providerInput(req);
  switch (route.provider) {
    case 'replicate': {
      const r = replicateInput(route.model, input);
      return 'refused' in r ? r : { endpoint: 'input', body: r.input };
    }
    case 'fal': {
      const r = falInput(route.model, input);
      return 'refused' in r ? r : { endpoint: 'input', body: { ...r.input } };
    }
    case 'runway': {
      const r = runwayRequest(route.model, input);
      return 'refused' in r ? r : { endpoint: r.path, body: { ...r.body } };
    }
    case 'kling': {
      const r = klingRequest({ attemptId: 'a-1', model: route.model, input, webhookUrl: 'https://api.example.com/v1/callbacks/kling/t' });
      return 'refused' in r ? r : { endpoint: '/v1/videos/text2video', body: r.body };
    }
  }
}

/** What the model delivers for a body, by its fixture: a fixed value, or the input that decides it (or its default). */
function delivered<T>(d: Delivered<T>, body: Record<string, unknown>): T | undefined {
  if ('fixed' in d) return d.fixed;
  const value = body[d.input] ?? d.default;
  if (d.values) return d.values[String(value)];
  return value === undefined ? undefined : (Number(value) as T);
}

/** The inputs a body names that the schema does not publish (a model ignores them, or refuses them). */
function unpublished(schema: object, body: Record<string, unknown>): string[] {
  const properties = (schema as { properties?: Record<string, unknown> }).properties ?? {};
  return Object.keys(body).filter((k) => !(k in properties));
}

/** Every request shape a route can be asked for: each resolution, 1..20 s, with and without an image, a short and a longest prompt. */
function requests(route: ProviderRoute): RouteRequest[] {
  const out: RouteRequest[] = [];
  for (const resolution of RESOLUTIONS) {
    for (let seconds = 1; seconds <= 20; seconds++) {
      for (const image of [undefined, IMAGE]) {
        for (const prompt of ['a heron at dawn', 'x'.repeat(route.maxPromptChars ?? 2000)])
          out.push({ prompt, duration_seconds: seconds, resolution, input_image_url: image });
      }
    }
  }
  return out;
}

const routes = MODEL_CATALOG.flatMap((m) => m.routes.map((r) => ({ entry: m.model, route: r })));

test('every catalog route has its model published input schema, with its sources and the date read', () => {
  for (const { entry, route } of routes) {
    const f = schemas.fixture(route.provider, route.model);
    assert.ok(f, `${entry}: no fixture for ${route.provider} ${route.model} under test/fixtures/provider-schemas/`);
    assert.ok(f.sources.length > 0 && f.sources.every((s) => /^https:\/\//.test(s.url) && /^\d{4}-\d{2}-\d{2}$/.test(s.read)), `${route.model}: sources`);
  }
});

test('every body the product can send for a catalog route validates against the model schema and asks for exactly the resolution, duration and image ordered', () => {
  const problems: string[] = [];
  for (const { entry, route } of routes) {
    const fixture = schemas.fixture(route.provider, route.model) as ProviderSchemaFixture;
    let admitted = 0;
    for (const req of requests(route)) {
      if (routeRefusal(route, req)) continue;
      admitted++;
      const what = `${entry} → ${route.provider} ${route.model} ${req.resolution} ${req.duration_seconds}s${req.input_image_url ? ' +image' : ''}`;
      const built = build(route, req);
      if ('refused' in built) {
        problems.push(`${what}: admitted by the catalog, refused by the builder (${built.refused.field}: ${built.refused.message})`);
        continue;
      }
      const issues = schemas.check(route.provider, route.model, built.endpoint, built.body) ?? [];
      for (const i of issues) problems.push(`${what}: ${built.endpoint}${i.path} ${i.message}`);
      const extra = unpublished(fixture.schemas[built.endpoint] ?? {}, built.body);
      if (extra.length > 0) problems.push(`${what}: sends inputs the model does not publish: ${extra.join(', ')}`);
      const resolution = delivered(fixture.delivers.resolution, built.body);
      if (resolution !== req.resolution) problems.push(`${what}: the model delivers ${String(resolution)}`);
      const seconds = delivered(fixture.delivers.durationSeconds, built.body);
      if (seconds !== req.duration_seconds) problems.push(`${what}: the model delivers ${String(seconds)} s`);
      const image = fixture.delivers.image;
      if (req.input_image_url && built.body[image?.input ?? ''] !== req.input_image_url)
        problems.push(`${what}: the image is not sent as the model's first frame`);
      if (!req.input_image_url && image && image.input in built.body) problems.push(`${what}: an image input without an image`);
    }
    if (admitted === 0) problems.push(`${entry} → ${route.model}: admits no request`);
    if (problems.length > 40) break;
  }
  assert.deepEqual(problems, []);
});

test('what a route refuses (resolution, duration, image), its request builder refuses too, before any call', () => {
  const problems: string[] = [];
  for (const { route } of routes) {
    for (const req of requests(route)) {
      const refusal = routeRefusal(route, req);
      if (!refusal || refusal.field === 'prompt') continue;
      const built = build(route, req);
      if (!('refused' in built))
        problems.push(`${route.model} ${req.resolution} ${req.duration_seconds}s${req.input_image_url ? ' +image' : ''}: sent (${refusal.message})`);
    }
  }
  assert.deepEqual(problems.slice(0, 20), []);
});

let h: Harness;
before(async () => {
  h = await startHarness();
  h.sim.setFaults({ callbacks: 'off' });
});
after(() => h?.close());

test('the simulator refuses, per model, what its published schema refuses, the way each provider answers a bad input; what it takes, it runs', async () => {
  const sim = h.sim.baseUrl();
  const klingAuth = () => `Bearer ${signKlingJwt(SIM_KLING_DEFAULTS.accessKey, SIM_KLING_DEFAULTS.secretKey, Math.floor(Date.now() / 1000), 600)}`;
  const post = async (url: string, headers: Record<string, string>, body: unknown) => {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    return { status: res.status, type: res.headers.get('content-type') ?? '', json: (await res.json()) as any };
  };
  const replicate = (model: string, input: Record<string, unknown>) =>
    post(`${sim}/replicate/v1/models/${model}/predictions`, { authorization: 'Bearer r8_unused_in_these_tests' }, { input });
  const fal = (model: string, input: Record<string, unknown>) => post(`${sim}/fal/${model}`, { authorization: `Key ${SIM_FAL_DEFAULTS.apiKey}` }, input);
  const runway = (path: string, body: Record<string, unknown>) =>
    post(`${sim}/runway${path}`, { authorization: `Bearer ${SIM_RUNWAY_DEFAULTS.apiSecret}`, 'x-runway-version': SIM_RUNWAY_DEFAULTS.version }, body);
  const kling = (body: Record<string, unknown>) => post(`${sim}/kling/v1/videos/text2video`, { authorization: klingAuth() }, body);

  // Replicate: 422 problem+json, "Input validation failed", the fields named.
  for (const [model, input, field] of [
    ['kwaivgi/kling-v2.1', { prompt: 'p', duration: 5, resolution: '720p', first_frame_image: IMAGE }, 'input.start_image'],
    ['kwaivgi/kling-v2.1', { prompt: 'p', start_image: IMAGE, duration: 6 }, 'input.duration'],
    ['luma/ray-2-720p', { prompt: 'p', duration: 6 }, 'input.duration'],
    ['kwaivgi/kling-v2.0', { prompt: 'p', duration: 7 }, 'input.duration'],
    ['minimax/video-01', { first_frame_image: IMAGE }, 'input.prompt'],
  ] as const) {
    const r = await replicate(model, input);
    assert.equal(r.status, 422, `${model} ${JSON.stringify(input)}`);
    assert.match(r.type, /application\/problem\+json/);
    assert.equal(r.json.title, 'Input validation failed');
    assert.ok(
      r.json.invalid_fields.some((f: { field: string }) => f.field === field),
      `${model}: ${JSON.stringify(r.json.invalid_fields)}`,
    );
  }
  // fal: 422 with `detail`, an array of {loc, msg, type}.
  const badFal = await fal('fal-ai/kling-video/v2/master/text-to-video', { prompt: 'p', duration: '6' });
  assert.equal(badFal.status, 422);
  assert.deepEqual(badFal.json.detail[0].loc, ['body', 'duration']);
  // Runway: 400 {error, issues}; gen4_turbo is image to video only.
  const badRunway = await runway('/v1/text_to_video', { model: 'gen4_turbo', promptText: 'p', ratio: '1280:720', duration: 5 });
  assert.deepEqual([badRunway.status, badRunway.json.error], [400, 'Validation of body failed']);
  const badVeo = await runway('/v1/image_to_video', { model: 'veo3.1', promptImage: IMAGE, ratio: '1280:720', duration: 5 });
  assert.equal(badVeo.status, 400);
  // Kling: HTTP 400, code 1201; kling-v2-master has no std/pro and takes 5 or 10 s.
  for (const extra of [{ mode: 'pro' }, { duration: '6' }]) {
    const r = await kling({ model_name: 'kling-v2-master', prompt: 'p', external_task_id: `bad-${JSON.stringify(extra)}`, ...extra });
    assert.deepEqual([r.status, r.json.code], [400, 1201], JSON.stringify(extra));
  }

  // And the bodies the product builds are taken.
  const ok = [
    await replicate('kwaivgi/kling-v2.1', { prompt: 'p', start_image: IMAGE, mode: 'pro', duration: 10 }),
    await replicate('luma/ray-2-720p', { prompt: 'p', duration: 9, aspect_ratio: '16:9' }),
    await replicate('minimax/video-01', { prompt: 'p' }),
    await fal('fal-ai/kling-video/v2/master/text-to-video', { prompt: 'p', duration: '10', aspect_ratio: '16:9' }),
    await runway('/v1/image_to_video', { model: 'gen4_turbo', promptImage: IMAGE, promptText: 'p', ratio: '1280:720', duration: 5 }),
    await kling({ model_name: 'kling-v2-master', prompt: 'p', duration: '10', aspect_ratio: '16:9', external_task_id: 'good-1' }),
  ];
  assert.deepEqual(
    ok.map((r) => r.status),
    [201, 201, 201, 200, 200, 200],
  );
});
