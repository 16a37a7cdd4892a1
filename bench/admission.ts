// `npm run bench -- admission`: sustained POST /v1/tasks at fixed concurrency levels against
// an API process with Temporal up (the fast path starts each workflow), the same with
// Temporal unreachable (outbox only), and pgbench running the create transaction with the same
// client counts on the same database. Figures are ratios against pgbench measured in this run.
import { sleep } from '../harness';
import { printProfile, summarizeProfiles } from './lib/cpuprofile';
import { createTaskClient } from './lib/http';
import { closedLoop, type LoadResult } from './lib/load';
import { describeCpu, measured, topStatements, type Measured } from './lib/measure';
import { runPgbench, type PgbenchResult } from './lib/pgbench';
import type { CpuUsage } from './lib/procstat';
import type { Reporter } from './lib/report';
import { freePort } from '../harness';
import { ratio, round } from './lib/stats';
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
}

const BODY = { model: 'minimax/video-01', prompt: 'bench admission', duration_seconds: 1, resolution: '480p' } as const;

interface Row {
  readonly mode: string;
  readonly clients: number;
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  readonly errors: number;
  readonly roundTripsPerOp: number | null;
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
        countFiles: [api.countFile],
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

function fromLoad(mode: string, m: Measured<LoadResult>): Row {
  // Round trips per create: everything the API process sent during the phase (warm-up
  // included) divided by every request of the phase (all have finished when it ends).
  const creates = m.result.started;
  return {
    mode,
    clients: m.result.concurrency,
    rate: m.result.rate,
    p50: m.result.latency.p50,
    p99: m.result.latency.p99,
    errors: m.result.errors,
    roundTripsPerOp: creates > 0 ? m.queries.total / creates : null,
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
    roundTripsPerOp: statementsPerTx,
    cpu: m.cpu,
  };
}

export async function runAdmission(o: AdmissionOptions, rep: Reporter): Promise<void> {
  const bw = await startBenchWorld('admission', {}, (l) => rep.log(`admission: ${l}`));
  const rows: Row[] = [];
  const statementReport: { mode: string; clients: number; statements: ReturnType<typeof topStatements> }[] = [];
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
    const pgGroups = async () => ({ postgres: await bw.backendPids(), temporal: bw.temporalPids() });

    for (const clients of o.concurrency) {
      // Interleaved per level, so the machine's drift hits every mode of a level alike.
      if (o.api) {
        const a = await apiPhase(bw, api, 'api', clients, tenants, o, rep);
        rows.push(fromLoad('API, Temporal up (fast path)', a));
        statementReport.push({ mode: 'API', clients, statements: topStatements(a.queries, a.result.started) });
        rep.log(`admission: cpu ${describeCpu(a.cpu)}`);
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
      rows.push(fromPgbench('pgbench: create transaction', p, 8));
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
        rows.push(fromPgbench('pgbench: every round trip of a create', f, 13));
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
    rep.table(
      `admission: POST /v1/tasks, ${o.durationS} s measured after ${o.warmupS} s warm-up, ${o.tenants} tenants (ratio = rate / pgbench create-transaction rate at the same client count)`,
      ['mode', 'clients', 'creates/s', 'p50 ms', 'p99 ms', 'errors', 'ratio', 'PG round trips/op', 'cores: api', 'postgres', 'temporal', 'bench', 'machine busy'],
      rows.map((r) => [
        r.mode,
        r.clients,
        round(r.rate, 0),
        round(r.p50, 1),
        round(r.p99, 1),
        r.errors,
        round(ratio(r.rate, baseline(r.clients)?.rate ?? NaN), 3),
        r.roundTripsPerOp === null ? null : round(r.roundTripsPerOp, 1),
        round(r.cpu.cores['api'] ?? NaN, 2),
        round(r.cpu.cores['postgres'] ?? 0, 2),
        round(r.cpu.cores['temporal'] ?? 0, 2),
        round(r.cpu.cores['bench (load generator)'] ?? 0, 2),
        `${r.cpu.machineBusyCores.toFixed(2)}/${r.cpu.machineCores}`,
      ]),
    );
    const last = statementReport[statementReport.length - 1];
    if (last) {
      rep.table(
        `admission: Postgres round trips of the API per create (c=${last.clients}, counted in the API process)`,
        ['statement', 'per create', 'count'],
        last.statements.map((s) => [s.statement, round(s.perUnit, 2), s.count]),
      );
    }
    printProfile(rep, 'admission: API process (Temporal up)', profile);
    const goals = o.concurrency.flatMap((c) => {
      const r = rows.find((x) => x.clients === c && x.mode.startsWith('API, Temporal up'));
      if (!r) return [];
      const rt = ratio(r.rate, baseline(c)?.rate ?? NaN);
      return [
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
        roundTripsPerOp: r.roundTripsPerOp === null ? null : round(r.roundTripsPerOp, 2),
        cores: Object.fromEntries(Object.entries(r.cpu.cores).map(([k, v]) => [k, round(v, 2)])),
        machineBusyCores: round(r.cpu.machineBusyCores, 2),
        ...(r.statuses ? { statuses: r.statuses } : {}),
      })),
      statements: statementReport,
      profile,
      goals,
    });
  } finally {
    await bw.close();
  }
}
