// `npm run bench -- callbacks`: signed Replicate-style callbacks (Standard Webhooks, the
// configured PROVIDER_REPLICATE_WEBHOOK_SECRET) for existing tasks and attempts, through the
// real endpoint POST /v1/callbacks/replicate/:token of an API process: verify on the raw
// body, inbox insert, 2xx, then the best-effort wake signal to the task's workflow (Temporal
// up, workflows started, no worker). About one callback in ten repeats an earlier event
// (same webhook-id, fresh timestamp and signature, as a provider's redelivery does). Baselines:
// pgbench running the inbox insert with ON CONFLICT DO NOTHING at the same client counts, and
// the bare ingest (issue #19): the same signed events checked with the API's Standard Webhooks
// check, stored as the API's job with the API's inbox statement and signalled by a minimal
// client in this process (pg, the Temporal client; no HTTP, no express, no drizzle, no zod
// validation, no token, no rate limit), with the API's signal coalescing
// (temporal/wakes.ts). The API's requests come from a lean keep-alive HTTP/1.1 sender
// (bench/lib/keep-alive-sender.ts), one connection per lane.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { createTaskWaker } from '../temporal/wakes';
import { recordAttemptCallback } from '../db/inbox';
import { predictionToJob, type ReplicatePrediction } from '../providers/replicate';
import { createCallbackTokens } from '../providers/callback-token';
import { createStandardWebhookVerifier, type StandardWebhookVerifier } from '../providers/standard-webhooks';
import { hrtimeUs, printProfile, summarizeProfiles, type ProfileWindow } from './lib/cpuprofile';
import { createTaskClient } from './lib/http';
import { createKeepAliveSender } from './lib/keep-alive-sender';
import { createTaskOrThrow } from './lib/tasks';
import { closedLoop, type LoadResult } from './lib/load';
import { describeCpu, measured, statementsPer, topStatements, type Measured } from './lib/measure';
import { runPgbench, type PgbenchResult } from './lib/pgbench';
import type { CpuUsage } from './lib/procstat';
import type { Reporter } from './lib/report';
import { ratio, round } from './lib/stats';
import { startBenchWorld, type BenchWorld } from './lib/world';

export interface CallbacksOptions {
  readonly concurrency: number[];
  readonly durationS: number;
  readonly warmupS: number;
  /** Tasks (each with one SUBMITTED attempt) the callbacks are spread over. */
  readonly tasks: number;
  /** Share of callbacks that repeat an earlier event, 0..1. */
  readonly duplicateShare: number;
  /** Profile the API process (node --cpu-prof) and print where its CPU went. */
  readonly cpuProfile: boolean;
  /** Also run the bare ingest baseline (minimal pg + Temporal client). */
  readonly bare: boolean;
}

interface Attempt {
  readonly attemptId: string;
  readonly taskId: string;
  readonly jobId: string;
  /** The callback URL's token (providers/callback-token.ts). */
  readonly token: string;
}

interface Row {
  readonly mode: string;
  readonly clients: number;
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  readonly errors: number;
  /** Statements the database executed per callback (pg_stat_statements); null where not counted. */
  readonly statementsPerOp: number | null;
  /** Wake signals sent to Temporal per callback stored (the waker coalesces per task), warm-up included. */
  readonly signalsPerStored: number | null;
  readonly cpu: CpuUsage;
}

/** The API's wake signals sent so far (vidorch_callback_wakes_total{result="sent"} on its operator listener). */
async function wakesSent(opsUrl: string): Promise<number> {
  const text = await (await fetch(`${opsUrl}/metrics`)).text();
  const m = /^vidorch_callback_wakes_total\{[^}]*result="sent"[^}]*\} (\d+)/m.exec(text);
  return m ? Number(m[1]) : NaN;
}

/** Waits (bounded) until a count of signals sent stops moving: a level's signals are its own. */
async function settleWakes(sent: () => Promise<number> | number, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  let last = -1;
  for (;;) {
    const n = await sent();
    if (n === last || Date.now() > until) return;
    last = n;
    await new Promise((r) => setTimeout(r, 300));
  }
}

function predictionBody(a: Attempt, seq: number): string {
  const now = new Date().toISOString();
  return JSON.stringify({
    // The get-prediction body, as Replicate's webhooks carry it (documented fields only).
    id: a.jobId,
    model: 'minimax/video-01',
    version: 'c8bcc4751328608bb75043b3af7bed4eabcf1a6c0a478d50a4cf57fa04bd5101',
    source: 'api',
    data_removed: false,
    input: { prompt: 'bench callbacks' },
    output: null,
    error: null,
    logs: `step ${seq}`,
    status: 'processing',
    created_at: now,
    started_at: now,
    completed_at: null,

    urls: { get: `http://127.0.0.1:7081/replicate/v1/predictions/${a.jobId}`, cancel: `http://127.0.0.1:7081/replicate/v1/predictions/${a.jobId}/cancel` },
    metrics: {},
  });
}

async function createAttempts(bw: BenchWorld, apiUrl: string, n: number, rep: Reporter): Promise<Attempt[]> {
  // Real tasks through the API (so their workflows exist and the wake signal has a target),
  // then one SUBMITTED attempt each, written directly.
  const [tenant] = await bw.createTenants(1);
  const http = createTaskClient(apiUrl, 16);
  const vidorch = http.as(tenant!.apiKey);
  const taskIds: string[] = [];
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < n) {
          const i = next++;
          taskIds.push(
            await createTaskOrThrow(vidorch, `cb-setup-${i}`, {
              model: 'minimax/video-01',
              prompt: `bench callbacks ${i}`,
              duration_seconds: 6,
              resolution: '720p',
            }),
          );
        }
      }),
    );
  } finally {
    http.close();
  }
  const { rows } = await bw.world.db.pool.query<{ attempt_id: string; task_id: string; provider_job_id: string }>(
    `INSERT INTO task_attempt (attempt_id, task_id, attempt_no, provider, provider_model, provider_job_id, submit_state, submit_started_at, submit_finished_at)
     SELECT gen_random_uuid(), t, 1, 'replicate', 'minimax/video-01', 'benchjob-' || md5(t::text), 'SUBMITTED', now(), now()
     FROM unnest($1::uuid[]) AS t
     RETURNING attempt_id, task_id, provider_job_id`,
    [taskIds],
  );
  rep.log(`callbacks: ${rows.length} tasks with a SUBMITTED attempt each`);
  const tokens = createCallbackTokens(bw.world.config.CALLBACK_TOKEN_SECRET);
  return rows.map((r) => ({ attemptId: r.attempt_id, taskId: r.task_id, jobId: r.provider_job_id, token: tokens.tokenFor(r.attempt_id) }));
}

interface SignedEvent {
  readonly id: string;
  readonly attempt: Attempt;
  readonly body: string;
}

/**
 * The benchmark's event stream: a new event per request, and every `1 / duplicateShare`-th
 * request a repeat of a recent one (a ring buffer of up to 1,000 events, filled by `remember`).
 */
function eventStream(prefix: string, attempts: Attempt[], duplicateShare: number) {
  const recent: SignedEvent[] = [];
  const every = duplicateShare > 0 ? Math.round(1 / duplicateShare) : Infinity;
  let counter = 0;
  return {
    next(seq: number): { ev: SignedEvent; repeat: boolean } {
      if (seq % every === every - 1 && recent.length > 0) return { ev: recent[(seq * 7919) % recent.length]!, repeat: true };
      const attempt = attempts[seq % attempts.length]!;
      const n = counter++;
      return { ev: { id: `${prefix}_${n}`, attempt, body: predictionBody(attempt, n) }, repeat: false };
    },
    remember(ev: SignedEvent, seq: number) {
      if (recent.length < 1000) recent.push(ev);
      else recent[n2(seq) % recent.length] = ev;
    },
  };
}

function signedHeaders(signer: Webhook, ev: SignedEvent): Record<string, string> {
  const now = new Date();
  return {
    'content-type': 'application/json',
    'webhook-id': ev.id,
    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
    'webhook-signature': signer.sign(ev.id, now, ev.body),
  };
}

const BARE_MODE = 'bare: verify + inbox + signal, minimal client';

/**
 * The bare ingest of one callback: the Standard Webhooks check on the raw body (the API's own,
 * providers/standard-webhooks.ts), the prediction normalised into the job the API stores
 * (predictionToJob, without the API's zod validation), the API's own inbox statement
 * (db/inbox.ts recordAttemptCallback: the attempt read, its checks and the deduped insert in one
 * named statement) over this process's plain pg pool, and the coalesced wake signal of the task
 * the statement returned. True when stored, false for a repeat.
 * The statement, the check and the row are the API's since the API sends, runs and stores those
 * (docs/performance.md "callbacks"): an ingest that inserted with the task id it already knew
 * would skip the attempt read the API cannot skip, one that checked with a slower HMAC would
 * measure the HMAC, and one that stored a thinner job (no provider time, no progress) a smaller row.
 */
function bareIngest(pool: pg.Pool, verifier: StandardWebhookVerifier, wake: (taskId: string) => void, region: string) {
  return async (ev: SignedEvent, headers: Record<string, string>): Promise<boolean> => {
    const check = verifier.verify({ id: headers['webhook-id'], timestamp: headers['webhook-timestamp'], signature: headers['webhook-signature'] }, ev.body);
    if (check !== 'ok') throw new Error(`bare ingest: signature ${check}`);
    const json = JSON.parse(ev.body) as ReplicatePrediction;
    const job = predictionToJob(json);
    const r = await recordAttemptCallback(pool, {
      provider: 'replicate',
      attemptId: ev.attempt.attemptId,
      job,
      providerEventId: ev.id,
      echoesAttempt: true,
      receivedRegion: region,
      raw: json,
    });
    if (r.outcome !== 'stored' && r.outcome !== 'duplicate') throw new Error(`bare ingest: ${r.outcome} for attempt ${ev.attempt.attemptId}`);
    if (r.outcome === 'duplicate') return false;
    wake(r.taskId);
    return true;
  };
}

export async function runCallbacks(o: CallbacksOptions, rep: Reporter): Promise<void> {
  const bw = await startBenchWorld('callbacks', {}, (l) => rep.log(`callbacks: ${l}`));
  const rows: Row[] = [];
  const statementReport: { clients: number; statements: ReturnType<typeof topStatements> }[] = [];
  let stopBare = async () => undefined as void;
  // From the first API level's start to the last one's end (the API's start-up left out; the
  // baselines between levels leave it nearly idle, and idle samples are not counted).
  const apiWindow = { fromUs: NaN, toUs: NaN };
  try {
    const { world } = bw;
    // The callback limits would measure themselves: lift them far over the offered load.
    const unlimited = { CALLBACK_RATE_PER_TOKEN_PER_MINUTE: '100000000', CALLBACK_RATE_PER_SOURCE_PER_MINUTE: '100000000' };
    const api = await bw.startApi('api', unlimited, { cpuProfile: o.cpuProfile });
    const attempts = await createAttempts(bw, api.url, o.tasks, rep);
    const signer = new Webhook(world.config.PROVIDER_REPLICATE_WEBHOOK_SECRET);
    const prefix = `msg_${randomUUID().slice(0, 8)}`;
    const stored = new Set<string>(); // event ids that got a 2xx answering "stored"
    const acked = new Set<string>(); // event ids that got any 2xx
    let duplicatesSent = 0;
    let duplicatesAcked = 0;
    let storedAgain = 0; // a repeat answered as stored: must stay 0
    const barePool = o.bare
      ? new pg.Pool({ connectionString: world.config.DATABASE_URL, max: world.config.DATABASE_POOL_MAX, application_name: 'bench-bare-callbacks' })
      : null;
    const bareWaker = createTaskWaker((taskId) => world.facade.wakeTask(taskId), { maxInFlight: world.config.WAKE_SIGNALS_MAX_IN_FLIGHT });
    const bare = barePool
      ? bareIngest(barePool, createStandardWebhookVerifier(world.config.PROVIDER_REPLICATE_WEBHOOK_SECRET), (t) => bareWaker.wake(t), world.config.REGION)
      : null;
    stopBare = async () => {
      await barePool?.end();
    };

    for (const [level, clients] of o.concurrency.entries()) {
      // One keep-alive connection per lane, as a provider's sender keeps them (bench/lib/keep-alive-sender.ts).
      const http = createKeepAliveSender(api.url, clients);
      // Ids unique across levels (a level's stream starts its counter at 0).
      const events = eventStream(`${prefix}_${level}`, attempts, o.duplicateShare);
      const sentBefore = await wakesSent(api.opsUrl);
      let storedHere = 0;
      let m: Measured<LoadResult>;
      if (Number.isNaN(apiWindow.fromUs)) apiWindow.fromUs = hrtimeUs();
      try {
        m = await measured(
          {
            cpuGroups: async () => ({ api: [api.proc.pid], postgres: await bw.backendPids(), temporal: bw.temporalPids() }),
            pgCounts: bw.pgCounts,
          },
          () =>
            closedLoop({
              label: `callbacks c=${clients}`,
              concurrency: clients,
              warmupMs: o.warmupS * 1000,
              durationMs: o.durationS * 1000,
              progress: rep.log,
              async request(seq) {
                const { ev, repeat } = events.next(seq);
                if (repeat) duplicatesSent++;
                const res = await http.post(`/v1/callbacks/replicate/${ev.attempt.token}`, signedHeaders(signer, ev), ev.body);
                if (res.status < 200 || res.status > 299) return { ok: false, status: String(res.status) };
                const dup = (JSON.parse(res.body.toString()) as { duplicate?: boolean }).duplicate === true;
                acked.add(ev.id);
                if (dup) {
                  if (repeat) duplicatesAcked++;
                } else {
                  if (stored.has(ev.id)) storedAgain++;
                  stored.add(ev.id);
                  storedHere++;
                  if (!repeat) events.remember(ev, seq);
                }
                return { ok: true, status: dup ? `${res.status} duplicate` : `${res.status} stored` };
              },
            }),
        );
      } finally {
        apiWindow.toUs = hrtimeUs();
        rep.log(`callbacks: ${http.connectionsOpened()} keep-alive connections opened for ${clients} lanes`);
        http.close();
      }
      await settleWakes(() => wakesSent(api.opsUrl));
      const apiSignals = (await wakesSent(api.opsUrl)) - sentBefore;
      rows.push({
        mode: 'API: verify + inbox + signal',
        clients,
        rate: m.result.rate,
        p50: m.result.latency.p50,
        p99: m.result.latency.p99,
        errors: m.result.errors,
        statementsPerOp: statementsPer(m.queries, m.result.started),
        signalsPerStored: storedHere > 0 ? apiSignals / storedHere : null,
        cpu: m.cpu,
      });
      if (m.queries) statementReport.push({ clients, statements: topStatements(m.queries, m.result.started, 6) });
      rep.log(`callbacks: cpu ${describeCpu(m.cpu)}`);

      if (bare) {
        const bareEvents = eventStream(`${prefix}b${level}`, attempts, o.duplicateShare);
        const bareSentBefore = bareWaker.stats().sent;
        let bareStored = 0;
        const b = await measured({ cpuGroups: async () => ({ postgres: await bw.backendPids(), temporal: bw.temporalPids() }) }, () =>
          closedLoop({
            label: `bare c=${clients}`,
            concurrency: clients,
            warmupMs: o.warmupS * 1000,
            durationMs: o.durationS * 1000,
            progress: rep.log,
            async request(seq) {
              const { ev, repeat } = bareEvents.next(seq);
              const isNew = await bare(ev, signedHeaders(signer, ev));
              if (isNew) bareStored++;
              if (isNew && !repeat) bareEvents.remember(ev, seq);
              return { ok: true, status: isNew ? 'stored' : 'duplicate' };
            },
          }),
        );
        await settleWakes(() => bareWaker.stats().sent);
        // One INSERT per callback (the signal is Temporal's).
        rows.push({
          mode: BARE_MODE,
          clients,
          rate: b.result.rate,
          p50: b.result.latency.p50,
          p99: b.result.latency.p99,
          errors: b.result.errors,
          statementsPerOp: 1,
          signalsPerStored: bareStored > 0 ? (bareWaker.stats().sent - bareSentBefore) / bareStored : null,
          cpu: b.cpu,
        });
        rep.log(`callbacks: cpu ${describeCpu(b.cpu)}`);
      }

      const payload = JSON.stringify({ job: { jobId: 'pgbjob', state: 'running' }, raw: JSON.parse(predictionBody(attempts[0]!, 0)) as unknown });
      const p: Measured<PgbenchResult> = await measured({ cpuGroups: async () => ({ postgres: await bw.backendPids(), temporal: bw.temporalPids() }) }, () =>
        runPgbench({
          label: `pgbench inbox c=${clients}`,
          databaseUrl: world.config.DATABASE_URL,
          script: 'bench/sql/callback-inbox.sql',
          clients,
          warmupS: o.warmupS,
          durationS: o.durationS,
          vars: {
            attempts: `{${attempts.map((a) => a.attemptId).join(',')}}`,
            tasks: `{${attempts.map((a) => a.taskId).join(',')}}`,
            n: String(attempts.length),
            region: world.config.REGION,
            payload,
          },
          progress: rep.log,
        }),
      );
      rows.push({
        mode: p.result.clients !== p.result.requestedClients ? `pgbench: inbox insert (${p.result.clients} clients)` : 'pgbench: inbox insert',
        clients,
        rate: p.result.rate,
        p50: p.result.latency.p50,
        p99: p.result.latency.p99,
        errors: p.result.failed,
        statementsPerOp: 1,
        signalsPerStored: null,
        cpu: p.cpu,
      });
      rep.log(`callbacks: cpu ${describeCpu(p.cpu)}`);
    }

    let profile = null;
    if (api.profileDir) {
      await api.proc.stop('SIGTERM', 15_000);
      const window: ProfileWindow = apiWindow;
      profile = summarizeProfiles(api.profileDir, Number.isNaN(window.toUs) ? {} : { window });
    }
    // Proof of exactly-once storage: every distinct event acknowledged is one inbox row.
    const { rows: inbox } = await world.db.pool.query<{ rows: number; distinct_ids: number }>(
      `SELECT count(*)::int AS rows, count(DISTINCT provider_event_id)::int AS distinct_ids
       FROM callback_inbox WHERE provider = 'replicate' AND provider_event_id LIKE $1`,
      [`${prefix}\\_%`],
    );
    const inboxRows = inbox[0]?.rows ?? -1;
    const distinctIds = inbox[0]?.distinct_ids ?? -1;
    const exactlyOnce = inboxRows === acked.size && distinctIds === inboxRows && storedAgain === 0;

    const baseline = (c: number) => rows.find((r) => r.clients === c && r.mode.startsWith('pgbench'));
    const bareOf = (c: number) => rows.find((r) => r.clients === c && r.mode === BARE_MODE);
    rep.table(
      `callbacks: POST /v1/callbacks/replicate/:token, ${o.durationS} s measured after ${o.warmupS} s warm-up, ${attempts.length} attempts, ${Math.round(o.duplicateShare * 100)} % repeats (ratio = rate / pgbench inbox-insert rate at the same client count; ÷ bare = rate / the bare ingest rate)`,
      [
        'mode',
        'clients',
        'callbacks/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'ratio',
        '÷ bare',
        'PG statements/op',
        'signals/stored',
        'cores: api',
        'postgres',
        'temporal',
        'bench',
        'machine busy',
      ],
      rows.map((r) => [
        r.mode,
        r.clients,
        round(r.rate, 0),
        round(r.p50, 1),
        round(r.p99, 1),
        r.errors,
        round(ratio(r.rate, baseline(r.clients)?.rate ?? NaN), 3),
        round(ratio(r.rate, bareOf(r.clients)?.rate ?? NaN), 3),
        r.statementsPerOp === null ? null : round(r.statementsPerOp, 1),
        r.signalsPerStored === null ? null : round(r.signalsPerStored, 2),
        round(r.cpu.cores['api'] ?? NaN, 2),
        round(r.cpu.cores['postgres'] ?? 0, 2),
        round(r.cpu.cores['temporal'] ?? 0, 2),
        round(r.cpu.cores['bench (load generator)'] ?? 0, 2),
        `${r.cpu.machineBusyCores.toFixed(2)}/${r.cpu.machineCores}`,
      ]),
    );
    rep.table(
      'callbacks: each distinct event stored once (all levels, warm-ups included)',
      ['figure', 'value'],
      [
        ['distinct events acknowledged (2xx)', acked.size],
        ['inbox rows for them', inboxRows],
        ['distinct webhook-ids among those rows', distinctIds],
        ['repeats sent', duplicatesSent],
        ['repeats answered duplicate: true', duplicatesAcked],
        ['repeats stored a second time', storedAgain],
        ['exactly once', exactlyOnce ? 'yes' : 'NO'],
      ],
    );
    const last = statementReport[statementReport.length - 1];
    if (last && last.statements.length > 0) {
      rep.table(
        `callbacks: Postgres statements per callback (the database's, c=${last.clients})`,
        ['statement', 'per callback', 'count'],
        last.statements.map((s) => [s.statement, round(s.perUnit, 2), s.count]),
      );
    }
    printProfile(rep, 'callbacks: API process', profile);
    const goals = o.concurrency.flatMap((c) => {
      const r = rows.find((x) => x.clients === c && x.mode.startsWith('API'));
      if (!r) return [];
      const rt = ratio(r.rate, baseline(c)?.rate ?? NaN);
      const rb = ratio(r.rate, bareOf(c)?.rate ?? NaN);
      return [
        ...(bareOf(c) ? [{ name: `API ÷ bare ingest at c=${c}`, target: '≥ 0.70', measured: round(rb, 3).toString(), met: rb >= 0.7 }] : []),
        { name: `callbacks/s at c=${c}`, target: '≥ 2,500', measured: round(r.rate, 0).toString(), met: r.rate >= 2500 },
        { name: `p99 at c=${c}`, target: '≤ 25 ms', measured: `${round(r.p99, 1)} ms`, met: r.p99 <= 25 },
        { name: `share of pgbench at c=${c}`, target: '≥ 20 %', measured: `${round(rt * 100, 1)} %`, met: rt >= 0.2 },
      ];
    });
    goals.push({ name: 'each distinct event stored once', target: 'rows = distinct acked', measured: `${inboxRows} / ${acked.size}`, met: exactlyOnce });
    rep.goals(goals);
    rep.result({
      bench: 'callbacks',
      durationS: o.durationS,
      warmupS: o.warmupS,
      attempts: attempts.length,
      duplicateShare: o.duplicateShare,
      rows: rows.map((r) => ({
        mode: r.mode,
        clients: r.clients,
        rate: round(r.rate, 1),
        p50: round(r.p50, 2),
        p99: round(r.p99, 2),
        errors: r.errors,
        ratio: round(ratio(r.rate, baseline(r.clients)?.rate ?? NaN), 4),
        ratioToBare: round(ratio(r.rate, bareOf(r.clients)?.rate ?? NaN), 4),
        statementsPerOp: r.statementsPerOp === null ? null : round(r.statementsPerOp, 2),
        signalsPerStored: r.signalsPerStored === null ? null : round(r.signalsPerStored, 3),
        cores: Object.fromEntries(Object.entries(r.cpu.cores).map(([k, v]) => [k, round(v, 2)])),
        machineBusyCores: round(r.cpu.machineBusyCores, 2),
      })),
      inbox: { acked: acked.size, rows: inboxRows, distinctIds, duplicatesSent, duplicatesAcked, storedAgain, exactlyOnce },
      statements: statementReport,
      profile,
      goals,
    });
    if (!exactlyOnce) process.exitCode = 1;
  } finally {
    await stopBare();
    await bw.close();
  }
}

/** A cheap deterministic spread for the ring buffer's replacement slot. */
function n2(seq: number): number {
  return (seq * 2654435761) >>> 0;
}
