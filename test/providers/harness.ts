// Shared fixtures of the adapter tests: one simulator and one webhook receiver per test file,
// both closed in `after` so the process exits.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { providerInput } from '../../activities/provider-input';
import { MODEL_CATALOG, RESOLUTIONS, routeRefusal, type ProviderRoute } from '../../domain/catalog';
import { createSimulator, type RunningSimulator, type Simulator, type SimulatorOptions } from '../../providers/simulator/server';
import type { LookupQuery, ProviderAdapter } from '../../providers/types';

export interface Delivery {
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  readonly token: string;
}

export interface Harness {
  readonly sim: Simulator;
  readonly receiverUrl: string;
  readonly deliveries: Delivery[];
  deliveriesFor(token: string): Delivery[];
  close(): Promise<void>;
}

export const listenOn = (s: Server): Promise<number> => new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));

export const closeServer = (s: Server): Promise<void> =>
  new Promise((resolve) => {
    s.close(() => resolve());
    s.closeAllConnections();
  });

/** A port nothing listens on (connection refused). */
export async function deadPort(): Promise<number> {
  const probe = createServer();
  const port = await listenOn(probe);
  await closeServer(probe);
  return port;
}

export async function startHarness(over: Partial<SimulatorOptions> = {}): Promise<Harness> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'provider-sim-test-'));
  const deliveries: Delivery[] = [];
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const token = (req.url ?? '').split('?')[0]?.split('/').filter(Boolean).pop() ?? '';
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks), token });
      res.writeHead(204).end();
    });
  });
  const receiverUrl = `http://127.0.0.1:${await listenOn(receiver)}`;
  const sim = createSimulator({
    apiToken: 'r8_unused_in_these_tests',
    webhookSecret: `whsec_${Buffer.from('unused-secret-0123456789abcdef').toString('base64')}`,
    generationMs: 300,
    outputTtlMs: 60_000,
    dataDir,
    webhookRetry: { attempts: 3, baseDelayMs: 20 },
    ...over,
  });
  const running: RunningSimulator = await sim.listen(0);
  return {
    sim,
    receiverUrl,
    deliveries,
    deliveriesFor: (token) => deliveries.filter((d) => d.token === token),
    async close() {
      await running.close();
      await closeServer(receiver);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

let seq = 0;
/** A fresh attempt id (UUID-shaped, as ours are) and its callback URL. */
export function newAttempt(receiverUrl: string, provider: string): { attemptId: string; webhookUrl: string } {
  const n = (++seq).toString(16).padStart(12, '0');
  const attemptId = `${process.pid.toString(16).padStart(8, '0').slice(-8)}-0000-4000-8000-${n}`;
  return { attemptId, webhookUrl: `${receiverUrl}/v1/callbacks/${provider}/${attemptId}` };
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export const TERMINAL = ['succeeded', 'failed', 'canceled', 'aborted'];

/** An unknown-outcome lookup for `token`: what was sent (`model`, `input`) in a window reaching back `backMs`. */
export function lookupQuery(token: string, over: Partial<LookupQuery> & { backMs?: number } = {}): LookupQuery {
  const { backMs = 60_000, ...rest } = over;
  return { token, model: 'acme/video', input: {}, since: new Date(Date.now() - backMs), until: new Date(Date.now() + 60_000), ...rest };
}

/**
 * Every task input (as activities/provider-input.ts builds it) that the catalog admits for a
 * route: each resolution, duration 1..20 s, with and without an image, a short and a longest prompt.
 */
export function admittedInputs(route: ProviderRoute): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const resolution of RESOLUTIONS) {
    for (let seconds = 1; seconds <= 20; seconds++) {
      for (const image of [undefined, 'https://example.com/first-frame.png']) {
        for (const prompt of ['a heron', 'x'.repeat(route.maxPromptChars ?? 2000)]) {
          const request = { prompt, duration_seconds: seconds, resolution, input_image_url: image };
          if (!routeRefusal(route, request)) out.push(providerInput(request));
        }
      }
    }
  }
  return out;
}

/** The catalog's routes at one provider. */
export const routesOf = (provider: string): ProviderRoute[] => MODEL_CATALOG.flatMap((m) => m.routes).filter((r) => r.provider === provider);

/** Submits, through `adapter`, every input the catalog admits for the provider's routes; each must be accepted. */
export async function submitEveryAdmitted(adapter: ProviderAdapter, provider: string): Promise<void> {
  const routes = routesOf(provider);
  if (routes.length === 0) throw new Error(`no catalog route at ${provider}`);
  for (const route of routes) {
    const inputs = admittedInputs(route);
    if (inputs.length === 0) throw new Error(`${route.model} admits no request`);
    for (const input of inputs) {
      const out = await adapter.submit({ ...newAttempt('https://api.example.com', provider), model: route.model, input });
      if (out.kind !== 'accepted') throw new Error(`${route.model} ${JSON.stringify(input).slice(0, 100)}: ${JSON.stringify(out)}`);
    }
  }
}
