// `npm run bench -- resilience`: the retry-storm experiment against the simulator. The provider
// refuses a share of submits with a proven rejection (429 without Retry-After: nothing was
// created, the task may try a new attempt) — 70 %, then 95 % — while N tasks per phase are
// created at once and real worker processes drive them; then the simulator heals (faults
// cleared) and the run keeps measuring. Printed: provider submit requests per task (retry
// amplification, counted by the simulator per attempt token, refused ones included) against
// the retry budget's exact bound (from the guard's exported settings), how long each worker's
// breaker was open, claim refusals by the guard's reason and each worker's calls (all three
// scraped off the worker's /metrics: vidorch_breaker_state, vidorch_provider_refusals_total,
// vidorch_provider_calls_total), attempts in flight by state, tasks ended / waiting, and
// provider calls per second after the heal. `--breaker-closed` sets the operator switch
// (provider_control.breaker_force) so the retry budget alone limits retries.
import { randomUUID } from 'node:crypto';
import { sleep } from '../harness';
import { CIRCUIT_BREAKER_DEFAULTS } from '../providers/resilience/circuit-breaker';
import { RETRY_BUDGET_DEFAULTS } from '../providers/resilience/retry-budget';
import { createCallbackTokens } from '../providers/callback-token';
import type { SubmitReceived } from '../providers/simulator/submit-log';
import { createTaskClient } from './lib/http';
import { createTaskOrThrow } from './lib/tasks';
import { startScraper, type MetricSample, type Scraper } from './lib/scrape';
import { describeCpu } from './lib/measure';
import { startCpuProbe, type CpuUsage } from './lib/procstat';
import type { Cell, Reporter } from './lib/report';
import { round } from './lib/stats';
import { startBenchWorld, type BenchWorld } from './lib/world';

export interface ResilienceOptions {
  /** Tasks created at once at the start of each failure phase. */
  readonly tasks: number;
  /** Share of submits refused with a 429, percent, one phase each. */
  readonly failureRates: readonly number[];
  readonly phaseSeconds: number;
  readonly healSeconds: number;
  readonly workers: number;
  /** MAX_SUBMIT_ATTEMPTS for the workers (product default 3). */
  readonly maxSubmitAttempts: number;
  readonly generationMs: number;
  /** Operator bulkhead (provider_control.max_in_flight for replicate); null = the adapter's. */
  readonly maxInFlight: number | null;
  /** Operator switch: force the breaker closed, so only the retry budget limits retries. */
  readonly breakerClosed: boolean;
  readonly createConcurrency: number;
}

const PROVIDER = 'replicate';
const IN_FLIGHT = ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'];
const BODY = (tag: string, i: number) =>
  ({ model: 'minimax/video-01', prompt: `bench resilience ${tag} ${i}`, duration_seconds: 6, resolution: '720p' }) as const;

type Reason = 'circuit open' | 'probes busy' | 'recovering' | 'bulkhead full' | 'retry budget' | 'other';
const REASONS: readonly Reason[] = ['circuit open', 'probes busy', 'recovering', 'bulkhead full', 'retry budget', 'other'];
/** How often each worker's /metrics is read: state changes and refusals are stamped to within this. */
const SCRAPE_MS = 100;

/** The labels of vidorch_provider_refusals_total (activities/provider-guard.ts) in this benchmark's words. */
function refusalReason(guard: string, reason: string): Reason {
  if (guard === 'breaker') return reason === 'probes-busy' ? 'probes busy' : reason === 'recovering' ? 'recovering' : 'circuit open';
  if (guard === 'bulkhead') return 'bulkhead full';
  if (guard === 'retry_budget') return 'retry budget';
  return 'other';
}

interface BreakerEvent {
  readonly atMs: number;
  readonly worker: string;
  readonly from: string;
  readonly to: string;
}
/** Provider calls one worker reported between two scrapes (by the breaker's verdict: accepted vs 429 here). */
interface WorkerCalls {
  readonly atMs: number;
  readonly worker: string;
  readonly success: number;
  readonly failure: number;
}
/** Claims one worker refused for one reason between two scrapes. */
interface Refusal {
  readonly atMs: number;
  readonly worker: string;
  readonly reason: Reason;
  readonly n: number;
}
interface StatusSnapshot {
  readonly succeeded: number;
  readonly failed: number;
  readonly otherEnded: number;
  /** SUBMITTING with the attempt PREPARED: waiting for the breaker, the bulkhead or the budget. */
  readonly preparedFirst: number;
  readonly preparedRetry: number;
  /** Between attempts (sleeping after a rejection) or not yet dispatched. */
  readonly dispatching: number;
  /** The provider has the job (or the call is in flight / unknown). */
  readonly atProvider: number;
  /** Output rescue and media checks. */
  readonly afterProvider: number;
  readonly total: number;
}
interface BulkheadSample {
  readonly atMs: number;
  /** Attempts in flight by their state (the bulkhead counts these minus the ones the provider reported finished). */
  readonly inFlight: number;
  /** Of those, accepted by the provider more than generation time + 1 s ago: the job is done there. */
  readonly doneAtProvider: number;
  /** Callbacks stored but not yet applied by the workflow. */
  readonly inboxUnapplied: number;
  readonly status: StatusSnapshot;
}
interface Phase {
  readonly name: string;
  readonly faultRate: number;
  readonly startMs: number;
  endMs: number;
  readonly taskIds: string[];
  end: StatusSnapshot | null;
  cpu: CpuUsage | null;
}

/** The product's guard settings: the defaults ProviderGuard's breaker and budget run with (activities/provider-guard.ts passes none). */
function guardSettings() {
  const b = CIRCUIT_BREAKER_DEFAULTS;
  const r = RETRY_BUDGET_DEFAULTS;
  return {
    ratio: r.ratio,
    floorPerWindow: (r.minRetriesPerSecond * r.windowMs) / 1000,
    windowMs: r.windowMs,
    bucketMs: r.windowMs / r.buckets,
    failureRateThreshold: b.failureRateThreshold,
    minimumRequests: b.minimumRequests,
    openMs: b.openMs,
    halfOpenSuccesses: b.halfOpenSuccesses,
    recoveryStartShare: b.recoveryStartShare,
    recoveryMs: b.recoveryMs,
  };
}
type Settings = ReturnType<typeof guardSettings>;

export async function runResilience(o: ResilienceOptions, rep: Reporter): Promise<void> {
  const settings = guardSettings();
  rep.log(
    `resilience: guard settings (product defaults): retry budget ${settings.ratio * 100} % of first attempts + ${settings.floorPerWindow} per ${settings.windowMs / 1000} s window per worker process; ` +
      `breaker trips at ≥ ${settings.failureRateThreshold * 100} % failures over ≥ ${settings.minimumRequests} calls, open ${settings.openMs / 1000} s, closes after ${settings.halfOpenSuccesses} probe successes, ` +
      `then admits ${settings.recoveryStartShare * 100} % → 100 % of claims over ${settings.recoveryMs / 1000} s`,
  );
  const bw = await startBenchWorld(
    'resilience',
    {
      SIMULATOR_GENERATION_MS: String(o.generationMs),
      // The attempt cap must not be what stops retries: the budget is under test.
      MAX_SUBMIT_ATTEMPTS: String(o.maxSubmitAttempts),
    },
    (l) => rep.log(`resilience: ${l}`),
  );
  const scrapers: Scraper[] = [];
  const unsubscribe: (() => void)[] = [];
  try {
    await runPhases(bw, o, rep, settings, scrapers, unsubscribe);
  } finally {
    for (const u of unsubscribe) u();
    for (const sc of scrapers) await sc.stop().catch(() => undefined);
    await bw.close();
  }
}

async function runPhases(
  bw: BenchWorld,
  o: ResilienceOptions,
  rep: Reporter,
  settings: Settings,
  scrapers: Scraper[],
  unsubscribe: (() => void)[],
): Promise<void> {
  const { world } = bw;
  const db = world.db.pool;
  const [tenant] = await bw.createTenants(1);
  const tenantId = tenant!.tenantId;

  // Every submit the simulator receives, with its arrival time and attempt token.
  const submits: SubmitReceived[] = [];
  unsubscribe.push(world.sim.onSubmit((s) => submits.push(s)));

  // Operator settings (provider_control), before any claim reads them.
  if (o.maxInFlight !== null || o.breakerClosed) {
    await db.query(
      `INSERT INTO provider_control (provider, max_in_flight, breaker_force, reason, updated_by) VALUES ($1, $2, $3, 'bench resilience', 'bench')
       ON CONFLICT (provider) DO UPDATE SET max_in_flight = EXCLUDED.max_in_flight, breaker_force = EXCLUDED.breaker_force`,
      [PROVIDER, o.maxInFlight, o.breakerClosed ? 'closed' : null],
    );
  }

  // Workers, with their /metrics read every SCRAPE_MS: breaker state changes, claim refusals
  // by reason, and the provider calls each one made.
  const breakerEvents: BreakerEvent[] = [];
  const refusals: Refusal[] = [];
  const workerCalls: WorkerCalls[] = [];
  const workerNames: string[] = [];
  const workerPids: number[] = [];
  const workerStart = new Map<string, number>();
  for (let i = 0; i < o.workers; i++) {
    const name = `worker-${i}`;
    workerNames.push(name);
    workerStart.set(name, Date.now());
    const { proc, metricsUrl } = await bw.startWorker(name);
    workerPids.push(proc.pid);
    let state = 'closed';
    const seen = new Map<string, number>();
    // The counters only grow: what is new since the last scrape happened in between.
    const delta = (key: string, value: number) => {
      const d = value - (seen.get(key) ?? 0);
      seen.set(key, value);
      return d;
    };
    const ours = (samples: MetricSample[], metric: string) => samples.filter((x) => x.name === metric && x.labels['provider'] === PROVIDER);
    scrapers.push(
      startScraper(metricsUrl, SCRAPE_MS, (atMs, samples) => {
        const now = ours(samples, 'vidorch_breaker_state').find((x) => x.value === 1)?.labels['state'];
        if (now && now !== state) {
          breakerEvents.push({ atMs, worker: name, from: state, to: now });
          state = now;
        }
        for (const x of ours(samples, 'vidorch_provider_refusals_total')) {
          const n = delta(`refusal ${x.labels['guard']}/${x.labels['reason']}`, x.value);
          if (n > 0) refusals.push({ atMs, worker: name, reason: refusalReason(x.labels['guard'] ?? '', x.labels['reason'] ?? ''), n });
        }
        const calls = ours(samples, 'vidorch_provider_calls_total');
        const count = (verdict: string) =>
          delta(`calls ${verdict}`, calls.find((x) => x.labels['verdict'] === verdict)?.value ?? seen.get(`calls ${verdict}`) ?? 0);
        const success = count('success');
        const failure = count('failure');
        if (success + failure > 0) workerCalls.push({ atMs, worker: name, success, failure });
      }),
    );
  }
  const sum = (rs: readonly { n: number }[]) => rs.reduce((a, r) => a + r.n, 0);
  const callsOf = (w: string, from: number, to: number) => {
    const mine = workerCalls.filter((c) => c.worker === w && c.atMs >= from && c.atMs < to);
    return { success: mine.reduce((a, c) => a + c.success, 0), failure: mine.reduce((a, c) => a + c.failure, 0) };
  };

  const http = createTaskClient(world.apiUrl, o.createConcurrency, { timeoutMs: 30_000 });
  const vidorch = http.as(tenant!.apiKey);
  const runTag = randomUUID().slice(0, 8);
  async function createTasks(tag: string, n: number): Promise<string[]> {
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(o.createConcurrency, n) }, async () => {
        while (next < n) {
          const i = next++;
          ids.push(await createTaskOrThrow(vidorch, `${runTag}-${tag}-${i}`, BODY(tag, i)));
        }
      }),
    );
    return ids;
  }

  async function snapshot(taskIds: string[]): Promise<StatusSnapshot> {
    const { rows } = await db.query<{ status: string; state: string | null; attempt_no: number | null; n: number }>(
      `SELECT t.status, a.submit_state AS state, a.attempt_no, count(*)::int AS n
       FROM generation_task t LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
       WHERE t.tenant_id = $1 AND t.task_id = ANY($2::uuid[])
       GROUP BY 1, 2, 3`,
      [tenantId, taskIds],
    );
    const s = { succeeded: 0, failed: 0, otherEnded: 0, preparedFirst: 0, preparedRetry: 0, dispatching: 0, atProvider: 0, afterProvider: 0, total: 0 };
    for (const r of rows) {
      s.total += r.n;
      if (r.status === 'SUCCEEDED') s.succeeded += r.n;
      else if (r.status === 'FAILED') s.failed += r.n;
      else if (r.status === 'CANCELLED' || r.status === 'MANUAL_REVIEW') s.otherEnded += r.n;
      else if (r.status === 'QUEUED' || r.status === 'DISPATCHING') s.dispatching += r.n;
      else if (r.status === 'SUBMITTING' && r.state === 'PREPARED') {
        if ((r.attempt_no ?? 1) > 1) s.preparedRetry += r.n;
        else s.preparedFirst += r.n;
      } else if (['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN', 'CANCEL_REQUESTED'].includes(r.status)) s.atProvider += r.n;
      else s.afterProvider += r.n;
    }
    return s;
  }
  const waiting = (s: StatusSnapshot) => s.preparedFirst + s.preparedRetry + s.dispatching;
  const describe = (s: StatusSnapshot) =>
    `${s.succeeded} SUCCEEDED, ${s.failed} FAILED, waiting: ${s.preparedFirst + s.preparedRetry} PREPARED (${s.preparedRetry} retries), ${s.dispatching} DISPATCHING, ${s.atProvider} at provider, ${s.afterProvider} after provider`;

  // Attempts in flight by state, and how many of them the provider has already finished (the
  // bulkhead no longer counts a job once its terminal report is in the inbox).
  // A Replicate submit carries the keyed token of its callback URL, not the attempt id (providers/callback-token.ts).
  const tokenOf = createCallbackTokens(world.config.CALLBACK_TOKEN_SECRET).tokenFor;
  const acceptedAt = new Map<string, number>();
  unsubscribe.push(world.sim.onSubmit((s) => void (s.token && !s.refused && acceptedAt.set(s.token, s.atMs))));
  async function bulkheadSample(taskIds: string[]): Promise<BulkheadSample> {
    const now = Date.now();
    const { rows } = await db.query<{ attempt_id: string }>(
      `SELECT attempt_id::text FROM task_attempt WHERE provider = $1 AND submit_state = ANY($2::text[])`,
      [PROVIDER, IN_FLIGHT],
    );
    const done = rows.filter((r) => (acceptedAt.get(tokenOf(r.attempt_id)) ?? acceptedAt.get(r.attempt_id) ?? now) < now - o.generationMs - 1_000).length;
    const { rows: inbox } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM callback_inbox WHERE processed_at IS NULL');
    return { atMs: now, inFlight: rows.length, doneAtProvider: done, inboxUnapplied: inbox[0]?.n ?? 0, status: await snapshot(taskIds) };
  }

  const stateAt = (w: string, t: number): string => {
    let s = 'closed';
    for (const e of breakerEvents) if (e.worker === w && e.atMs <= t) s = e.to;
    return s;
  };
  const breakerNow = () => workerNames.map((w, i) => `w${i} ${stateAt(w, Date.now())}`).join(', ');

  // Warm-up: one task through the whole path with no faults.
  rep.log('resilience: warm-up task (no faults)');
  const [warm] = await createTasks('warmup', 1);
  const warmDeadline = Date.now() + 180_000;
  for (;;) {
    const { rows } = await db.query<{ status: string }>('SELECT status FROM generation_task WHERE task_id = $1', [warm]);
    if (rows[0]?.status === 'SUCCEEDED') break;
    if (rows[0] && ['FAILED', 'CANCELLED', 'MANUAL_REVIEW'].includes(rows[0].status)) throw new Error(`warm-up task ended ${rows[0].status}`);
    if (Date.now() > warmDeadline) throw new Error('warm-up task did not succeed within 180 s');
    await sleep(250);
  }
  await sleep(2_000); // the other worker(s) finish starting
  const submitsBefore = submits.length;
  const runStart = Date.now();
  const runIds: string[] = [];
  const samples: BulkheadSample[] = [];

  const phases: Phase[] = [];
  let progressTimer: NodeJS.Timeout | null = null;
  let lastProgress = Promise.resolve();
  const progress = (label: string, since: number) => {
    progressTimer = setInterval(() => {
      lastProgress = lastProgress.then(async () => {
        const b = await bulkheadSample(runIds).catch(() => null);
        if (b) samples.push(b);
        const calls = submits.length - submitsBefore;
        const last5 = submits.filter((x) => x.atMs > Date.now() - 5_000).length / 5;
        rep.log(
          `[resilience ${label}] ${String(Math.round((Date.now() - since) / 1000)).padStart(3)}s  provider calls ${calls} (${last5.toFixed(1)}/s)  claim refusals ${sum(refusals)}  breaker ${breakerNow()}` +
            (b ? `  in flight by state ${b.inFlight} (${b.doneAtProvider} done at the provider)  ${describe(b.status)}` : ''),
        );
      });
    }, 5_000);
  };
  const stopProgress = async () => {
    if (progressTimer) clearInterval(progressTimer);
    await lastProgress;
  };
  const cpuGroups = async () => {
    const { rows } = await db.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = $1', [bw.dbName]);
    return { worker: workerPids, postgres: rows.map((r) => r.pid), temporal: bw.temporalPids() };
  };

  for (const rate of o.failureRates) {
    const name = `${rate} % refused`;
    world.sim.setFaults({ submit: 'rate_limit', submit_fault_rate: rate / 100 });
    const phase: Phase = { name, faultRate: rate, startMs: Date.now(), endMs: 0, taskIds: [], end: null, cpu: null };
    phases.push(phase);
    const probe = startCpuProbe(cpuGroups);
    rep.log(`resilience: phase "${name}": creating ${o.tasks} tasks at once`);
    progress(`${rate}%`, phase.startMs);
    phase.taskIds.push(...(await createTasks(`p${rate}`, o.tasks)));
    runIds.push(...phase.taskIds);
    rep.log(`resilience: ${o.tasks} tasks created in ${((Date.now() - phase.startMs) / 1000).toFixed(1)} s`);
    await sleep(Math.max(0, phase.startMs + o.phaseSeconds * 1000 - Date.now()));
    await stopProgress();
    phase.endMs = Date.now();
    phase.cpu = await probe.stop();
    phase.end = await snapshot(runIds);
  }

  // Heal: faults cleared, keep measuring.
  world.sim.clearFaults();
  const healAt = Date.now();
  const atHeal = phases[phases.length - 1]?.end ?? (await snapshot(runIds));
  const heal: Phase = { name: 'healed', faultRate: 0, startMs: healAt, endMs: 0, taskIds: [], end: null, cpu: null };
  phases.push(heal);
  const healProbe = startCpuProbe(cpuGroups);
  rep.log(`resilience: healed (faults cleared); measuring ${o.healSeconds} s`);
  progress('healed', healAt);
  while (Date.now() < healAt + o.healSeconds * 1000) {
    await sleep(1_000);
    const s = await snapshot(runIds);
    if (s.succeeded + s.failed + s.otherEnded >= s.total) {
      rep.log('resilience: every task ended');
      break;
    }
  }
  await stopProgress();
  heal.endMs = Date.now();
  heal.cpu = await healProbe.stop();
  heal.end = await snapshot(runIds);
  http.close();
  for (const sc of scrapers.splice(0)) await sc.stop(); // one last scrape each
  const runEnd = heal.endMs;

  // ---------------------------------------------------------------- figures
  const runSubmits = submits.slice(submitsBefore);
  const { rows: attempts } = await db.query<{ attempt_id: string; task_id: string; attempt_no: number }>(
    `SELECT a.attempt_id::text, a.task_id::text, a.attempt_no FROM task_attempt a JOIN generation_task t USING (task_id) WHERE t.tenant_id = $1`,
    [tenantId],
  );
  // By the attempt id (Kling's external_task_id) and by the keyed callback token (Replicate, fal).
  const attemptById = new Map(attempts.flatMap((a) => [[a.attempt_id, a] as const, [tokenOf(a.attempt_id), a] as const]));
  const callsByTask = new Map<string, number>();
  const callsByAttempt = new Map<string, number>();
  let firstCalls = 0;
  let retryCalls = 0;
  let unmatched = 0;
  for (const s of runSubmits) {
    const a = s.token ? attemptById.get(s.token) : undefined;
    if (!a) {
      unmatched++;
      continue;
    }
    callsByTask.set(a.task_id, (callsByTask.get(a.task_id) ?? 0) + 1);
    callsByAttempt.set(a.attempt_id, (callsByAttempt.get(a.attempt_id) ?? 0) + 1);
    if (a.attempt_no === 1) firstCalls++;
    else retryCalls++;
  }
  const attemptsCalledTwice = [...callsByAttempt.values()].filter((n) => n > 1).length;

  // Breaker time per worker and state: segments from the state-change lines.
  const timeIn = (w: string, state: string, from: number, to: number) => {
    const segs: { at: number; state: string }[] = [{ at: workerStart.get(w) ?? runStart, state: 'closed' }];
    for (const e of breakerEvents) if (e.worker === w) segs.push({ at: e.atMs, state: e.to });
    let total = 0;
    segs.forEach((seg, i) => {
      const end = segs[i + 1]?.at ?? Number.POSITIVE_INFINITY;
      const a = Math.max(seg.at, from);
      const b = Math.min(end, to);
      if (seg.state === state && b > a) total += b - a;
    });
    return total / 1000;
  };
  const refusalsIn = (from: number, to: number, worker?: string) => {
    const c = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<Reason, number>;
    for (const r of refusals) if (r.atMs >= from && r.atMs < to && (!worker || r.worker === worker)) c[r.reason] += r.n;
    return c;
  };

  const forced = o.breakerClosed ? ' (forced closed by the operator switch)' : '';
  const phaseRows: Cell[][] = phases.map((p) => {
    const inPhase = runSubmits.filter((s) => s.atMs >= p.startMs && s.atMs < p.endMs);
    const refused = inPhase.filter((s) => s.refused).length;
    const c = refusalsIn(p.startMs, p.endMs);
    const end = p.end!;
    const secs = (p.endMs - p.startMs) / 1000;
    return [
      p.name,
      round(secs, 0),
      p.taskIds.length,
      inPhase.length,
      refused,
      inPhase.length - refused,
      round(inPhase.length / secs, 2),
      workerNames.map((w) => round(timeIn(w, 'open', p.startMs, p.endMs), 0)).join(' / '),
      workerNames.map((w) => round(timeIn(w, 'half-open', p.startMs, p.endMs), 1)).join(' / '),
      c['circuit open'] + c['probes busy'],
      c['recovering'],
      c['bulkhead full'],
      c['retry budget'],
      end.succeeded,
      end.failed,
      end.preparedFirst,
      end.preparedRetry,
      end.dispatching,
      end.atProvider + end.afterProvider,
    ];
  });
  rep.table(
    `resilience: ${o.tasks} tasks per failure phase (${o.phaseSeconds} s each, 429 without Retry-After), then healed ${o.healSeconds} s; ${o.workers} worker process(es); MAX_SUBMIT_ATTEMPTS=${o.maxSubmitAttempts}; breaker${forced || ' automatic'}; task counts at the end of each phase cover all tasks so far`,
    [
      'phase',
      's',
      'new tasks',
      'provider calls',
      '429',
      'accepted',
      'calls/s',
      'breaker open s (per worker)',
      'half-open s',
      'refused: breaker open/probes busy',
      'refused: recovering ramp',
      'refused: bulkhead',
      'refused: retry budget',
      'SUCCEEDED',
      'FAILED',
      'waiting PREPARED 1st attempt',
      'waiting PREPARED retry',
      'DISPATCHING',
      'at/after provider',
    ],
    phaseRows,
  );
  for (const p of phases) {
    // Claims refused per second at their peak: refusals carry exact delays (no jitter for the
    // breaker's), so the tasks an open breaker turned away all come back at the same instant.
    const perSec = new Map<number, number>();
    for (const r of refusals)
      if (r.atMs >= p.startMs && r.atMs < p.endMs) perSec.set(Math.floor(r.atMs / 1000), (perSec.get(Math.floor(r.atMs / 1000)) ?? 0) + r.n);
    const peak = Math.max(0, ...perSec.values());
    rep.log(`${p.name}: peak claim refusals in one second ${peak}${p.cpu ? `; cpu ${describeCpu(p.cpu)}` : ''}`);
  }

  // Amplification per cohort and the budget's bound.
  const T = (runEnd - runStart) / 1000;
  const minWindowS = (settings.windowMs - settings.bucketMs) / 1000;
  const windowsPerProcess = Math.ceil(T / minWindowS) + 1;
  const floorCalls = o.workers * settings.floorPerWindow * windowsPerProcess;
  const allIds = phases.flatMap((p) => p.taskIds);
  const cohortRows: Cell[][] = [];
  const cohorts = [...phases.filter((p) => p.taskIds.length > 0).map((p) => ({ name: `tasks of "${p.name}"`, ids: p.taskIds })), { name: 'all', ids: allIds }];
  const taskOfToken = (t: string | null) => (t ? attemptById.get(t)?.task_id : undefined);
  for (const c of cohorts) {
    const ids = new Set(c.ids);
    const calls = c.ids.map((id) => callsByTask.get(id) ?? 0);
    const total = calls.reduce((a, b) => a + b, 0);
    const called = calls.filter((n) => n > 0).length;
    const beforeHeal = runSubmits.filter((s) => s.atMs < healAt && ids.has(taskOfToken(s.token) ?? '')).length;
    cohortRows.push([
      c.name,
      c.ids.length,
      beforeHeal,
      round(beforeHeal / c.ids.length, 3),
      total,
      round(total / c.ids.length, 3),
      called,
      round(total / Math.max(1, called), 3),
      c.ids.length - called,
      calls.filter((n) => n >= 2).length,
      Math.max(0, ...calls),
    ]);
  }
  rep.table(
    'resilience: provider submit requests per task (retry amplification; counted by the simulator per attempt token, 429s included)',
    [
      'tasks',
      'n',
      'calls until heal',
      'calls/task until heal',
      'calls (whole run)',
      'calls/task',
      'tasks called',
      'calls/called task',
      'never called',
      'called ≥ 2×',
      'max calls on a task',
    ],
    cohortRows,
  );
  const n = allIds.length;
  const totalCalls = firstCalls + retryCalls;
  const retryBound = settings.ratio * firstCalls + floorCalls;
  const ampBound = 1 + settings.ratio + floorCalls / n;
  const held = retryCalls <= retryBound && totalCalls / n <= ampBound;
  rep.log('');
  rep.log(
    `retry budget bound: retries ≤ ${settings.ratio}·F + P·${settings.floorPerWindow}·(⌈T/${minWindowS} s⌉ + 1), ` +
      `F = first attempts called = ${firstCalls}, P = ${o.workers} worker processes, T = ${round(T, 0)} s → retries ≤ ${round(retryBound, 1)}; measured retries ${retryCalls} → ${retryCalls <= retryBound ? 'HELD' : 'BROKEN'}`,
  );
  rep.log(
    `amplification: ${totalCalls} calls / ${n} tasks = ${round(totalCalls / n, 3)} (per first attempt called: ${round(totalCalls / Math.max(1, firstCalls), 3)}) ≤ 1 + ${settings.ratio} + ${floorCalls}/${n} = ${round(ampBound, 3)} → ${totalCalls / n <= ampBound ? 'HELD' : 'BROKEN'}` +
      ` (calls not matched to an attempt: ${unmatched}; attempts called more than once: ${attemptsCalledTwice})`,
  );
  const noBudget = (p: number) => (1 - Math.pow(p, o.maxSubmitAttempts)) / (1 - p);
  rep.log(
    `for comparison (computed, not measured): with only the attempt cap (${o.maxSubmitAttempts}) and no breaker or budget, a task would make ${o.failureRates.map((r) => `${round(noBudget(r / 100), 2)} calls at ${r} %`).join(', ')}`,
  );

  // After the heal: per second, then every 5 s with the bulkhead's count.
  const healRows: Cell[][] = [];
  const healBins = Math.min(30, Math.ceil((runEnd - healAt) / 1000));
  for (let k = 0; k < healBins; k++) {
    const a = healAt + k * 1000;
    const b = a + 1000;
    const inBin = runSubmits.filter((s) => s.atMs >= a && s.atMs < b);
    const c = refusalsIn(a, b);
    healRows.push([
      `${k}–${k + 1}`,
      inBin.length,
      inBin.filter((s) => !s.refused).length,
      c['circuit open'] + c['probes busy'],
      c['recovering'],
      c['bulkhead full'],
      c['retry budget'],
      workerNames.map((w) => stateAt(w, b)).join(' / '),
    ]);
  }
  rep.table(
    'resilience: after the heal, per second (calls = submits the simulator received; refusals = claims turned away before any call)',
    [
      's after heal',
      'calls',
      'accepted',
      'refused: open/probes',
      'refused: recovering',
      'refused: bulkhead',
      'refused: budget',
      'breaker (per worker, end of second)',
    ],
    healRows,
  );
  const sampleRows: Cell[][] = samples
    .filter((s) => s.atMs >= healAt)
    .map((s) => [
      round((s.atMs - healAt) / 1000, 0),
      runSubmits.filter((x) => x.atMs >= s.atMs - 5_000 && x.atMs < s.atMs).length,
      s.inFlight,
      s.doneAtProvider,
      s.inboxUnapplied,
      sum(refusals.filter((r) => r.reason === 'bulkhead full' && r.atMs >= s.atMs - 5_000 && r.atMs < s.atMs)),
      s.status.succeeded,
      waiting(s.status),
      s.status.afterProvider,
    ]);
  rep.table(
    `resilience: after the heal, every 5 s: attempts in flight by state (bulkhead limit ${o.maxInFlight ?? "the adapter's maxConcurrency"}; it does not count jobs whose terminal report waits in the inbox) and how many of them the provider had already finished (accepted > generation ${o.generationMs} ms + 1 s ago)`,
    [
      's after heal',
      'calls in last 5 s',
      'in flight by state',
      'of which done at provider',
      'callbacks not yet applied',
      'bulkhead refusals in last 5 s',
      'SUCCEEDED',
      'waiting',
      'rescue/media',
    ],
    sampleRows,
  );

  const first10 = runSubmits.filter((s) => s.atMs >= healAt && s.atMs < healAt + 10_000);
  const perSec10 = Array.from({ length: 10 }, (_, k) => first10.filter((s) => s.atMs >= healAt + k * 1000 && s.atMs < healAt + (k + 1) * 1000).length);
  const waitingAtHeal = waiting(atHeal);
  rep.log(
    `first 10 s after the heal: ${first10.length} calls, per second ${perSec10.join(' ')} (max ${Math.max(...perSec10)}); ${waitingAtHeal} tasks were waiting at the heal`,
  );
  const successAfterHeal = runSubmits.find((s) => s.atMs >= healAt && !s.refused);
  rep.log(`first accepted call after the heal: ${successAfterHeal ? `+${round((successAfterHeal.atMs - healAt) / 1000, 1)} s` : 'none'}`);

  // The recovery ramp per worker: share of the claims reaching the breaker that it let through
  // in the 10 s after it closed (the bulkhead is checked before the breaker, the budget after).
  const rampRows: Cell[][] = [];
  workerNames.forEach((w, i) => {
    const close = breakerEvents.find((e) => e.worker === w && e.to === 'closed' && e.atMs >= healAt)?.atMs;
    if (close === undefined) return;
    for (const [a, b] of [
      [0, 5],
      [5, 10],
      [10, 30],
    ] as const) {
      const from = close + a * 1000;
      const to = close + b * 1000;
      const mine = callsOf(w, from, to);
      const calls = mine.success + mine.failure;
      const c = refusalsIn(from, to, w);
      const passed = calls + c['retry budget'];
      const asked = passed + c['recovering'];
      const mid = (a + b) / 2;
      const ramp = Math.min(1, settings.recoveryStartShare + ((1 - settings.recoveryStartShare) * mid * 1000) / settings.recoveryMs);
      rampRows.push([
        `w${i}`,
        `+${round((close - healAt) / 1000, 1)} s`,
        `${a}–${b} s`,
        calls,
        round(calls / (b - a), 1),
        c['retry budget'],
        c['recovering'],
        asked,
        round(passed / Math.max(1, asked), 2),
        round(ramp, 2),
      ]);
    }
  });
  if (rampRows.length > 0) {
    rep.table(
      "resilience: the recovery ramp per worker after its breaker closed (calls: the worker's own vidorch_provider_calls_total)",
      [
        'worker',
        'closed after heal',
        'window after close',
        'calls',
        'calls/s',
        'then refused by budget',
        'refused by ramp',
        'claims at the breaker',
        'admitted share',
        'ramp share (mid-window)',
      ],
      rampRows,
    );
  } else {
    rep.log(`no breaker closed after the heal${forced}`);
  }

  // How each half-open window ended, and the retry-budget refusals inside it (each one is
  // handed back to the breaker as a success by ProviderGuard.admit, so it counts as a probe
  // success although no call was made).
  for (const w of workerNames) {
    const evs = breakerEvents.filter((e) => e.worker === w);
    evs.forEach((e, i) => {
      if (e.from !== 'half-open') return;
      const opened = [...evs.slice(0, i)].reverse().find((x) => x.to === 'half-open')?.atMs ?? e.atMs;
      // State changes, calls and refusals are all stamped by the scrape that saw them (≤ SCRAPE_MS late).
      const mine = callsOf(w, opened, e.atMs + 1);
      const budget = sum(refusals.filter((r) => r.worker === w && r.reason === 'retry budget' && r.atMs >= opened && r.atMs <= e.atMs));
      const phase = phases.find((p) => e.atMs >= p.startMs && e.atMs < (p.endMs || Number.POSITIVE_INFINITY));
      rep.log(
        `w${workerNames.indexOf(w)} half-open → ${e.to} @${round((e.atMs - runStart) / 1000, 1)}s (${phase?.name ?? '?'}) after ${round((e.atMs - opened) / 1000, 1)} s: ` +
          `its calls ${mine.success + mine.failure} (${mine.success} accepted, ${mine.failure} 429), its retry-budget refusals ${budget}`,
      );
    });
  }
  rep.log(
    `breaker state changes: ${breakerEvents.map((e) => `w${workerNames.indexOf(e.worker)} ${e.from}→${e.to} @${round((e.atMs - runStart) / 1000, 1)}s`).join(', ') || `none${forced}`}`,
  );
  rep.log(`phase starts (s from the first phase): ${phases.map((p) => `${p.name} @${round((p.startMs - runStart) / 1000, 1)}`).join(', ')}`);
  const reported = workerCalls.filter((c) => c.atMs >= runStart).reduce((a, c) => a + c.success + c.failure, 0);
  rep.log(`calls the workers reported (their vidorch_provider_calls_total since the warm-up): ${reported}; the simulator received ${runSubmits.length}`);
  rep.log(`logs: ${world.dataDir} (removed at exit unless DRILL_KEEP_DATA=1)`);

  rep.result({
    benchmark: 'resilience',
    settings,
    options: o,
    phases: phases.map((p, i) => ({ name: p.name, faultRate: p.faultRate, seconds: (p.endMs - p.startMs) / 1000, row: phaseRows[i], end: p.end, cpu: p.cpu })),
    calls: { total: totalCalls, first: firstCalls, retries: retryCalls, unmatched, attemptsCalledTwice, tasks: n, perTask: totalCalls / n },
    bound: { retries: retryBound, amplification: ampBound, held },
    heal: { first10PerSecond: perSec10, waitingAtHeal, samples: sampleRows, ramp: rampRows },
    breakerEvents: breakerEvents.map((e) => ({ ...e, atS: (e.atMs - runStart) / 1000 })),
  });
}
