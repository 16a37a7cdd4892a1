// `npm run bench -- admission`: sustained POST /v1/tasks at fixed concurrency levels against
// an API process with Temporal up (the fast path starts each workflow), the same with
// Temporal unreachable (outbox only), pgbench running the create transaction with the same
// client counts on the same database, and the bare admission baseline: the same create
// transaction, statement for statement, from a minimal client in this process (pg, no express,
// no drizzle) followed by the same workflow start and outbox mark. Ratios are printed against
// both baselines measured in this run (the goal: API ÷ bare ≥ 0.70).
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { sleep } from '../harness';
import { printProfile, summarizeProfiles } from './lib/cpuprofile';
import { createTaskClient } from './lib/http';
import { closedLoop, type LoadResult } from './lib/load';
import { describeCpu, measured, statementsPer, topStatements, type Measured } from './lib/measure';
import { runPgbench, type PgbenchResult } from './lib/pgbench';
import type { CpuUsage } from './lib/procstat';
import type { Reporter } from './lib/report';
import { freePort } from '../harness';
import { ratio, round } from './lib/stats';
import { CREATE_MODES_LITERAL } from '../db/task-admission';
import { createTask } from './lib/tasks';
import { startBenchWorld, type ApiProcess, type BenchTenant, type BenchWorld } from './lib/world';

export interface AdmissionOptions {
  readonly concurrency: number[];
  readonly durationS: number;
  readonly warmupS: number;
  readonly tenants: number;
  /** Also run the API with Temporal unreachable. */
  readonly outboxOnly: boolean;
  /** Also run pgbench with every round trip of a create (admission-full.sql). */
  readonly full: boolean;
  /** Also run pgbench with the account CAS moved last in the transaction (a proposed fix). */
  readonly casLast: boolean;
  /** Run the API modes (false: pgbench only). */
  readonly api: boolean;
  /** Profile the API process (node --cpu-prof) and print where its CPU went. */
  readonly cpuProfile: boolean;
  /** Also run the bare admission baseline (minimal pg + Temporal client, same transaction and start). */
  readonly bare: boolean;
}

const BODY = { model: 'minimax/video-01', prompt: 'bench admission', duration_seconds: 6, resolution: '720p' } as const;

interface Row {
  readonly mode: string;
  readonly clients: number;
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  readonly errors: number;
  /** Statements the database executed per create (pg_stat_statements); null where not counted. */
  readonly statementsPerOp: number | null;
  readonly cpu: CpuUsage;
  readonly statuses?: Record<string, number>;
}

async function apiPhase(
  bw: BenchWorld,
  api: ApiProcess,
  label: string,
  clients: number,
  tenants: BenchTenant[],
  o: AdmissionOptions,
  rep: Reporter,
): Promise<Measured<LoadResult>> {
  const http = createTaskClient(api.url, clients);
  const clientOf = tenants.map((t) => http.as(t.apiKey));
  const prefix = `${label}-${clients}-${Date.now().toString(36)}`;
  try {
    return await measured(
      {
        cpuGroups: async () => ({ api: [api.proc.pid], postgres: await bw.backendPids(), temporal: bw.temporalPids() }),
        pgCounts: bw.pgCounts,
      },
      () =>
        closedLoop({
          label: `${label} c=${clients}`,
          concurrency: clients,
          warmupMs: o.warmupS * 1000,
          durationMs: o.durationS * 1000,
          progress: rep.log,
          async request(seq) {
            const res = await createTask(clientOf[seq % tenants.length]!, `${prefix}-${seq}`, BODY);
            return { ok: res.status === 202, status: String(res.status) };
          },
        }),
    );
  } finally {
    http.close();
  }
}

// The bare admission baseline (issue #19): what one create costs without the API. The create
// transaction of api/tasks.service.ts createTask() statement for statement (BEGIN, the one
// statement of db/task-admission.ts, COMMIT; bench/sql/admission-tx.sql is the same for pgbench),
// parameterised as the API sends it, then the same workflow start (the world's facade: the
// options the API uses) and the same outbox mark. A pool as large as the API's (DATABASE_POOL_MAX).
const BARE_SQL = {
  // The one statement of db/task-admission.ts admitTask(): fence share lock, task, outbox row,
  // first transition, reserve ledger row and account CAS, each gated on the one before.
  admit: `WITH fence AS (
      SELECT mode FROM region_write_fence WHERE resource_scope = $1 AND active_region = $2 AND write_epoch = $3 FOR SHARE
    ), task AS (
      INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
          reserved_amount, request_hash, request, provider, provider_model, priority, deadline_at)
      SELECT $4::uuid, $5::uuid, $5::uuid, $2::text, $3::bigint, 'QUEUED', $6::text, $7::numeric, $8::text, $9::jsonb,
          'replicate', 'minimax/video-01', 0, now() + make_interval(secs => 3600)
      FROM fence WHERE fence.mode = ANY ('${CREATE_MODES_LITERAL}'::text[])
      ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
      RETURNING *
    ), outbox AS (
      INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
      SELECT $10::uuid, 'generation_task', task_id, 'GenerationTaskCreated', $11::jsonb, 1, $2::text, $3::bigint FROM task
    ), transition AS (
      INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
      SELECT task_id, NULL, 'QUEUED', NULL::bigint, 0, 'api.create', $12::text, $2::text, $3::bigint FROM task
    ), ledger AS (
      INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
      SELECT $13::uuid, $5::uuid, task_id, $14::text, 'RESERVE', $7::numeric, $2::text, $3::bigint, NULL FROM task
      ON CONFLICT (business_key) DO NOTHING
      RETURNING entry_id
    ), account AS (
      UPDATE credit_account SET reserved = reserved + $7::numeric, version = version + 1, updated_at = now()
      WHERE tenant_id = $5::uuid AND balance - reserved >= $7::numeric AND EXISTS (SELECT 1 FROM ledger)
      RETURNING version
    )
    SELECT EXISTS (SELECT 1 FROM fence) AS fence_held, (SELECT mode FROM fence) AS fence_mode, EXISTS (SELECT 1 FROM ledger) AS reserved, EXISTS (SELECT 1 FROM account) AS moved,
      (SELECT (balance - reserved)::text FROM credit_account WHERE tenant_id = $5::uuid) AS available_credits, task.*
    FROM (SELECT 1) AS one LEFT JOIN task ON true`,
  mark: `UPDATE outbox_event SET published_at = now(), publish_attempts = publish_attempts + 1
    WHERE event_id IN (SELECT event_id FROM outbox_event WHERE event_id = $1 AND published_at IS NULL FOR UPDATE SKIP LOCKED)`,
} as const;
/** BEGIN, the admission statement, COMMIT, the mark. */
const BARE_STATEMENTS = 4;
const BARE_MODE = 'bare: same transaction + start, minimal client';

async function bareCreate(pool: pg.Pool, bw: BenchWorld, tenantId: string, key: string): Promise<void> {
  const { config, facade } = bw.world;
  const epoch = 1;
  const taskId = randomUUID();
  const eventId = randomUUID();
  const amount = '0.5';
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const { rows } = await c.query<{ fence_held: boolean; reserved: boolean; moved: boolean; task_id: string | null }>(BARE_SQL.admit, [
      config.FENCE_SCOPE,
      config.REGION,
      epoch,
      taskId,
      tenantId,
      key,
      amount,
      randomUUID(),
      BODY,
      eventId,
      { task_id: taskId, tenant_id: tenantId, provider: 'replicate', priority: 0 },
      `tenant:${tenantId}`,
      randomUUID(),
      `task:${taskId}:reserve`,
    ]);
    const r = rows[0];
    if (!r?.fence_held) throw new Error('fence rejected');
    if (r.task_id === null) throw new Error('duplicate key');
    if (!r.reserved || !r.moved) throw new Error('insufficient credits');
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
  await facade.startGeneration({ taskId, tenantId, provider: 'replicate', priority: 0 });
  await pool.query(BARE_SQL.mark, [eventId]);
}

async function barePhase(
  bw: BenchWorld,
  pool: pg.Pool,
  clients: number,
  tenants: BenchTenant[],
  o: AdmissionOptions,
  rep: Reporter,
): Promise<Measured<LoadResult>> {
  const prefix = `bare-${clients}-${Date.now().toString(36)}`;
  return measured({ cpuGroups: async () => ({ postgres: await bw.backendPids(), temporal: bw.temporalPids() }) }, () =>
    closedLoop({
      label: `bare c=${clients}`,
      concurrency: clients,
      warmupMs: o.warmupS * 1000,
      durationMs: o.durationS * 1000,
      progress: rep.log,
      async request(seq) {
        await bareCreate(pool, bw, tenants[seq % tenants.length]!.tenantId, `${prefix}-${seq}`);
        return { ok: true, status: 'created' };
      },
    }),
  );
}

function fromLoad(mode: string, m: Measured<LoadResult>): Row {
  // Statements per create: everything the database executed during the phase (warm-up
  // included) divided by every request of the phase (all have finished when it ends).
  const creates = m.result.started;
  return {
    mode,
    clients: m.result.concurrency,
    rate: m.result.rate,
    p50: m.result.latency.p50,
    p99: m.result.latency.p99,
    errors: m.result.errors,
    statementsPerOp: statementsPer(m.queries, creates),
    cpu: m.cpu,
    statuses: m.result.statuses,
  };
}

function fromPgbench(mode: string, m: Measured<PgbenchResult>, statementsPerTx: number): Row {
  return {
    mode: m.result.clients !== m.result.requestedClients ? `${mode} (${m.result.clients} clients)` : mode,
    clients: m.result.requestedClients,
    rate: m.result.rate,
    p50: m.result.latency.p50,
    p99: m.result.latency.p99,
    errors: m.result.failed,
    statementsPerOp: statementsPerTx,
    cpu: m.cpu,
  };
}

export async function runAdmission(o: AdmissionOptions, rep: Reporter): Promise<void> {
  const bw = await startBenchWorld('admission', {}, (l) => rep.log(`admission: ${l}`));
  const rows: Row[] = [];
  const statementReport: { mode: string; clients: number; statements: ReturnType<typeof topStatements> }[] = [];
  const cleanup: (() => Promise<void> | undefined)[] = [];
  try {
    const { world } = bw;
    const tenants = await bw.createTenants(o.tenants);
    rep.log(`admission: ${tenants.length} tenants; starting API processes`);
    // Every mode shares one database, and the pgbench runs and the outbox-only API leave
    // unpublished outbox rows that no relay publishes (none runs here): past
    // OUTBOX_WATERMARK_COUNT (10,000) the API pauses creates with a 503, by design
    // (docs/modes.md). That was every c=64 request in the first sessions. Lifted for both API
    // processes: this benchmark measures capacity.
    const noWatermark = { OUTBOX_WATERMARK_COUNT: '100000000' };
    const api = await bw.startApi('api', noWatermark, { cpuProfile: o.cpuProfile });
    const deadTemporal = `127.0.0.1:${await freePort()}`;
    const apiOutbox = o.outboxOnly ? await bw.startApi('api-outbox-only', { TEMPORAL_ADDRESS: deadTemporal, ...noWatermark }) : null;
    const vars = {
      tenants: `{${tenants.map((t) => t.tenantId).join(',')}}`,
      ntenants: String(tenants.length),
      scope: world.config.FENCE_SCOPE,
      region: world.config.REGION,
      epoch: '1',
    };
    const barePool = o.bare
      ? new pg.Pool({ connectionString: world.config.DATABASE_URL, max: world.config.DATABASE_POOL_MAX, application_name: 'bench-bare-admission' })
      : null;
    cleanup.push(() => barePool?.end());
    const pgGroups = async () => ({ postgres: await bw.backendPids(), temporal: bw.temporalPids() });

    for (const clients of o.concurrency) {
      // Interleaved per level, so the machine's drift hits every mode of a level alike.
      if (o.api) {
        const a = await apiPhase(bw, api, 'api', clients, tenants, o, rep);
        rows.push(fromLoad('API, Temporal up (fast path)', a));
        if (a.queries) statementReport.push({ mode: 'API', clients, statements: topStatements(a.queries, a.result.started) });
        rep.log(`admission: cpu ${describeCpu(a.cpu)}`);
      }
      if (barePool) {
        const b = await barePhase(bw, barePool, clients, tenants, o, rep);
        rows.push({ ...fromLoad(BARE_MODE, b), statementsPerOp: BARE_STATEMENTS });
        rep.log(`admission: cpu ${describeCpu(b.cpu)}`);
      }
      if (apiOutbox) {
        const b = await apiPhase(bw, apiOutbox, 'api-outbox', clients, tenants, o, rep);
        rows.push(fromLoad('API, Temporal down (outbox only)', b));
        rep.log(`admission: cpu ${describeCpu(b.cpu)}`);
      }
      const p = await measured({ cpuGroups: pgGroups }, () =>
        runPgbench({
          label: `pgbench tx c=${clients}`,
          databaseUrl: world.config.DATABASE_URL,
          script: 'bench/sql/admission-tx.sql',
          clients,
          warmupS: o.warmupS,
          durationS: o.durationS,
          vars,
          progress: rep.log,
        }),
      );
      rows.push(fromPgbench('pgbench: create transaction', p, 3));
      rep.log(`admission: cpu ${describeCpu(p.cpu)}`);
      if (o.casLast) {
        const f = await measured({ cpuGroups: pgGroups }, () =>
          runPgbench({
            label: `pgbench cas-last c=${clients}`,
            databaseUrl: world.config.DATABASE_URL,
            script: 'bench/sql/admission-tx-cas-last.sql',
            clients,
            warmupS: o.warmupS,
            durationS: o.durationS,
            vars,
            progress: rep.log,
          }),
        );
        rows.push(fromPgbench('pgbench: create transaction, account CAS last', f, 8));
        rep.log(`admission: cpu ${describeCpu(f.cpu)}`);
      }
      if (o.full) {
        const f = await measured({ cpuGroups: pgGroups }, () =>
          runPgbench({
            label: `pgbench full c=${clients}`,
            databaseUrl: world.config.DATABASE_URL,
            script: 'bench/sql/admission-full.sql',
            clients,
            warmupS: o.warmupS,
            durationS: o.durationS,
            vars,
            progress: rep.log,
          }),
        );
        rows.push(fromPgbench('pgbench: every round trip of a create', f, 6));
        rep.log(`admission: cpu ${describeCpu(f.cpu)}`);
      }
      await sleep(500);
    }

    let profile = null;
    if (api.profileDir) {
      await api.proc.stop('SIGTERM', 15_000);
      profile = summarizeProfiles(api.profileDir);
    }
    const baseline = (clients: number) => rows.find((r) => r.clients === clients && r.mode.startsWith('pgbench: create transaction'));
    const bareOf = (clients: number) => rows.find((r) => r.clients === clients && r.mode === BARE_MODE);
    rep.table(
      `admission: POST /v1/tasks, ${o.durationS} s measured after ${o.warmupS} s warm-up, ${o.tenants} tenants (ratio = rate / pgbench create-transaction rate at the same client count; ÷ bare = rate / the bare admission rate)`,
      [
        'mode',
        'clients',
        'creates/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'ratio',
        '÷ bare',
        'PG statements/op',
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
        round(r.cpu.cores['api'] ?? NaN, 2),
        round(r.cpu.cores['postgres'] ?? 0, 2),
        round(r.cpu.cores['temporal'] ?? 0, 2),
        round(r.cpu.cores['bench (load generator)'] ?? 0, 2),
        `${r.cpu.machineBusyCores.toFixed(2)}/${r.cpu.machineCores}`,
      ]),
    );
    const last = statementReport[statementReport.length - 1];
    if (last && last.statements.length > 0) {
      rep.table(
        `admission: Postgres statements per create (the database's, c=${last.clients})`,
        ['statement', 'per create', 'count'],
        last.statements.map((s) => [s.statement, round(s.perUnit, 2), s.count]),
      );
    }
    printProfile(rep, 'admission: API process (Temporal up)', profile);
    const goals = o.concurrency.flatMap((c) => {
      const r = rows.find((x) => x.clients === c && x.mode.startsWith('API, Temporal up'));
      if (!r) return [];
      const rt = ratio(r.rate, baseline(c)?.rate ?? NaN);
      const rb = ratio(r.rate, bareOf(c)?.rate ?? NaN);
      return [
        ...(bareOf(c) ? [{ name: `API ÷ bare admission at c=${c}`, target: '≥ 0.70', measured: round(rb, 3).toString(), met: rb >= 0.7 }] : []),
        { name: `creates/s at c=${c}`, target: '≥ 500', measured: round(r.rate, 0).toString(), met: r.rate >= 500 },
        { name: `p99 at c=${c}`, target: '≤ 50 ms', measured: `${round(r.p99, 1)} ms`, met: r.p99 <= 50 },
        { name: `share of pgbench at c=${c}`, target: '≥ 15 %', measured: `${round(rt * 100, 1)} %`, met: rt >= 0.15 },
      ];
    });
    rep.goals(goals);
    rep.result({
      bench: 'admission',
      durationS: o.durationS,
      warmupS: o.warmupS,
      tenants: o.tenants,
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
        cores: Object.fromEntries(Object.entries(r.cpu.cores).map(([k, v]) => [k, round(v, 2)])),
        machineBusyCores: round(r.cpu.machineBusyCores, 2),
        ...(r.statuses ? { statuses: r.statuses } : {}),
      })),
      statements: statementReport,
      profile,
      goals,
    });
  } finally {
    for (const c of cleanup) await c();
    await bw.close();
  }
}
