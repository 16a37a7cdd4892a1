// Drill: unknown provider outcomes at volume. Tasks go through three faults in turn —
// accept-then-hang (the provider creates the job and never answers), a worker SIGKILLed while
// submits are in flight, and lost callbacks — and must all converge with at most one
// provider job per task, a balanced ledger and nothing lost. `dropWebhooks` drops every
// callback from the start (nothing but polls and lookups reconciles), and `providers` spreads
// the tasks over several providers, each reported on its own (docs/providers.md "Proof of absence").
import { eq, inArray } from 'drizzle-orm';
import type { ProviderName } from '../../domain/catalog';
import { generationTask, taskAttempt } from '../../db/schema';
import { sleep } from '../../harness';
import { createTasks, type DrillWorld, ledgerImbalance, providerJobsPerTask, startDrillWorld, waitFor, awaitConvergence } from './harness';

/** What one provider's tasks came to. */
export interface ProviderFigures {
  readonly tasks: number;
  readonly maxProviderJobsPerTask: number;
  readonly parked: number;
  readonly succeeded: number;
}

/** A task request pinned to each provider: its catalog model at a resolution and duration it takes (domain/catalog.ts). */
const PINNED: Record<ProviderName, { model: string; resolution: string; duration_seconds: number; input_image_url?: string }> = {
  replicate: { model: 'minimax/video-01', resolution: '720p', duration_seconds: 6 },
  kling: { model: 'kling-v2-master', resolution: '720p', duration_seconds: 1 },
  // fal's Kling text-to-video takes 5 or 10 s; Runway's gen4_turbo is image to video, 2–10 s.
  fal: { model: 'fal-ai/kling-video/v2/master/text-to-video', resolution: '720p', duration_seconds: 5 },
  runway: { model: 'gen4_turbo', resolution: '720p', duration_seconds: 2, input_image_url: 'https://example.com/drill-first-frame.png' },
};

export interface UnknownOutcomeOptions {
  readonly tasks: number;
  readonly log: (line: string) => void;
  readonly timeoutMs?: number;
  /** Drop every webhook, in every phase. */
  readonly dropWebhooks?: boolean;
  /** Tasks go round-robin to these providers (default: Replicate only). */
  readonly providers?: readonly ProviderName[];
  /** The simulated Kling makes a new task readable only this long after its create (SIMULATOR_KLING_VISIBLE_AFTER_MS). */
  readonly klingVisibleAfterMs?: number;
  /** What the simulated Kling answers a get of an id it does not serve (SIMULATOR_KLING_NOT_FOUND). */
  readonly klingNotFound?: '404-1203' | '400-1201';
}

export interface UnknownOutcomeReport {
  readonly tasks: number;
  readonly accepted: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly manualReview: number;
  readonly maxProviderJobsPerTask: number;
  readonly providerJobsHistogram: Record<string, number>;
  readonly ledgerImbalance: number;
  readonly lost: number;
  readonly convergeSeconds: number;
  readonly phases: Record<string, number>;
  readonly webhooksDropped: boolean;
  readonly byProvider: Partial<Record<ProviderName, ProviderFigures>>;
}

/**
 * How long a phase may take to send its submits: a provider with a few slots (Kling: 5) sends a
 * few at a time, and a hung submit keeps its slot until its job is found (later still when the
 * simulated Kling serves new tasks late). The unknown-outcome deadline below.
 */
const PHASE_WAIT_MS = 180_000;

/**
 * What each provider's bulkhead admits right after a worker starts: 20 % of its default limit, at
 * least 2 (docs/providers.md "Ramp after a rebuild"; Kling's 5 slots admit 2).
 */
const SLOTS_AT_START: Record<ProviderName, number> = { replicate: 10, fal: 2, runway: 2, kling: 2 };

/** Tasks round-robin over `providers`, each pinned to its provider's model. */
const pinnedBody = (providers: readonly ProviderName[]) => (i: number) => PINNED[providers[i % providers.length]!];

async function attemptStates(world: DrillWorld, taskIds: string[]) {
  const rows = await world.db.db.select().from(taskAttempt).where(inArray(taskAttempt.task_id, taskIds));
  const count = (s: string) => rows.filter((r) => r.submit_state === s).length;
  return { rows, count };
}

/** Per provider: tasks, the most provider jobs any task got, how many parked, how many succeeded. */
async function figuresByProvider(world: DrillWorld, taskIds: string[], jobsPerTask: Map<string, number>) {
  const rows = await world.db.db
    .select({ id: generationTask.task_id, provider: generationTask.provider, status: generationTask.status })
    .from(generationTask)
    .where(inArray(generationTask.task_id, taskIds));
  const out: Partial<Record<ProviderName, ProviderFigures>> = {};
  for (const r of rows) {
    const p = r.provider as ProviderName;
    const f = out[p] ?? { tasks: 0, maxProviderJobsPerTask: 0, parked: 0, succeeded: 0 };
    out[p] = {
      tasks: f.tasks + 1,
      maxProviderJobsPerTask: Math.max(f.maxProviderJobsPerTask, jobsPerTask.get(r.id) ?? 0),
      parked: f.parked + (r.status === 'MANUAL_REVIEW' ? 1 : 0),
      succeeded: f.succeeded + (r.status === 'SUCCEEDED' ? 1 : 0),
    };
  }
  return out;
}

export async function runUnknownOutcomeDrill(opts: UnknownOutcomeOptions): Promise<UnknownOutcomeReport> {
  const { log } = opts;
  const providers = opts.providers && opts.providers.length > 0 ? opts.providers : (['replicate'] as const);
  // Every fault config below keeps the webhooks off when they are dropped.
  const drop = opts.dropWebhooks ? ({ callbacks: 'off' } as const) : {};
  const world = await startDrillWorld(
    'unknown-outcome',
    {
      SIMULATOR_GENERATION_MS: '1500',
      PROVIDER_HTTP_TIMEOUT_MS: '5000',
      POLL_INITIAL_MS: '500',
      POLL_MAX_MS: '2000',
      UNKNOWN_PROOF_DELAY_MS: '5000',
      UNKNOWN_OUTCOME_DEADLINE_MS: '180000',
      WORKER_MAX_CONCURRENT_ACTIVITIES: '100',
      SIMULATOR_KLING_VISIBLE_AFTER_MS: String(opts.klingVisibleAfterMs ?? 0),
      SIMULATOR_KLING_NOT_FOUND: opts.klingNotFound ?? '404-1203',
    },
    log,
  );
  try {
    await world.startWorker('worker-a');
    await world.startWorker('worker-b');
    const [n1, n2] = [Math.round(opts.tasks / 3), Math.round(opts.tasks / 3)];
    const n3 = opts.tasks - n1 - n2;
    const started = Date.now();
    const phases: Record<string, number> = {};

    log(`phase 1: accept-then-hang for ${n1} submits`);
    world.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: n1, ...drop });
    const phase1 = await createTasks(world, 'hang', n1, 16, pinnedBody(providers));
    await waitFor(async () => {
      const { rows, count } = await attemptStates(world, phase1);
      return rows.length >= n1 && count('PREPARED') + count('SUBMITTING') === 0;
    }, PHASE_WAIT_MS);
    phases['hang_unknown'] = (await attemptStates(world, phase1)).rows.filter((r) => r.unknown_since).length;

    log(`phase 2: ${n2} slow submits, then SIGKILL worker-a mid-call`);
    world.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 3000, submit_fault_count: n2, ...drop });
    const phase2 = await createTasks(world, 'crash', n2, 16, pinnedBody(providers));
    // Each provider's bulkhead admits its own share: wait for some in flight on every provider,
    // never more than one provider's bulkhead admits at a worker's start.
    const inFlight = Math.max(1, Math.min(Math.floor(Math.min(n2, 10) / providers.length), ...providers.map((p) => SLOTS_AT_START[p])));
    await waitFor(async () => (await attemptStates(world, phase2)).count('SUBMITTING') >= inFlight, PHASE_WAIT_MS);
    phases['in_flight_at_kill'] = (await attemptStates(world, phase2)).count('SUBMITTING');
    await world.workers.get('worker-a')!.stop('SIGKILL', 1_000);
    await sleep(1_000);
    await world.startWorker('worker-a2');

    log(`phase 3: ${n3} tasks with callbacks lost`);
    world.sim.setFaults({ callbacks: 'off' });
    const phase3 = await createTasks(world, 'nocallback', n3, 16, pinnedBody(providers));
    const all = [...phase1, ...phase2, ...phase3];

    const c = await awaitConvergence(world.db, all.length, opts.timeoutMs ?? 10 * 60_000, {
      progress: (p) => log(`converging: ${p.settled}/${all.length} settled ${JSON.stringify(p.byStatus)}`),
    });
    const convergeSeconds = (Date.now() - started) / 1000;

    const jobsPerTask = await providerJobsPerTask(world);
    const histogram: Record<string, number> = {};
    for (const id of all) {
      const k = String(jobsPerTask.get(id) ?? 0);
      histogram[k] = (histogram[k] ?? 0) + 1;
    }
    const found = await world.db.db.select({ id: taskAttempt.task_id }).from(taskAttempt).where(eq(taskAttempt.attempt_no, 1));
    const known = new Set(found.map((f) => f.id));
    const lost = all.filter((id) => !known.has(id)).length + (all.length - c.settled);
    return {
      tasks: opts.tasks,
      accepted: all.length,
      succeeded: c.byStatus['SUCCEEDED'] ?? 0,
      failed: c.byStatus['FAILED'] ?? 0,
      manualReview: c.byStatus['MANUAL_REVIEW'] ?? 0,
      maxProviderJobsPerTask: Math.max(0, ...jobsPerTask.values()),
      providerJobsHistogram: histogram,
      ledgerImbalance: await ledgerImbalance(world.db),
      lost,
      convergeSeconds,
      phases,
      webhooksDropped: opts.dropWebhooks ?? false,
      byProvider: await figuresByProvider(world, all, jobsPerTask),
    };
  } finally {
    await world.close();
  }
}
