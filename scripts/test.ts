// `npm test`: starts a throwaway Temporal dev server (headless, in memory) and an S3 server on
// free ports, runs node's test runner over test/**/*.test.ts with the repo's Node 24, then
// stops both. Exits with the runner's exit code.
//
//   npm test                                   all of test/**/*.test.ts
//   npm test -- test/api/foo.test.ts           only these files
//   npm test -- --test-name-pattern=retry      extra node flags (use the --flag=value form)
//
// The stack's logs go to .data/test/<pid>/{temporal,s3}.log; that folder is deleted after a
// passing run and kept (and named) after a failing one.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError, loadConfig } from '../config/env';
import { REPO_ROOT, fileLogger, formatMs, freePorts, nodeBinary, readToolPaths, startS3, startTemporal, type ManagedProcess } from '../harness';

const started = Date.now();
const TEST_DIR = path.join(REPO_ROOT, 'test');
const RUNS_DIR = path.join(REPO_ROOT, '.data', 'test');
const RUN_DIR = path.join(RUNS_DIR, String(process.pid));
const BUCKETS = ['vidorch-outputs'];
/** The second S3 server (the fallback endpoint of docs/decisions/0029), with its own bucket. */
const FALLBACK_BUCKETS = ['vidorch-outputs-fallback'];

function say(msg: string): void {
  process.stdout.write(`test: ${msg}\n`);
}

/** test/**\/*.test.ts, sorted, relative to the repo root. */
function findTestFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && !entry.name.startsWith('.')) out.push(...findTestFiles(full));
    } else if (entry.isFile() && entry.name.endsWith('.test.ts')) {
      out.push(path.relative(REPO_ROOT, full));
    }
  }
  return out.sort();
}

/** Removes .data/test/<pid> folders of runs whose process is gone (killed runs leave them). */
function removeStaleRunDirs(): void {
  if (!fs.existsSync(RUNS_DIR)) return;
  for (const name of fs.readdirSync(RUNS_DIR)) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
      continue; // still running
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EPERM') continue;
    }
    fs.rmSync(path.join(RUNS_DIR, name), { recursive: true, force: true });
  }
}

const TAP_SUMMARY = /^# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) /;

async function main(): Promise<number> {
  let config;
  try {
    config = loadConfig({ ...process.env, VIDORCH_ENV: 'test' });
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const issue of err.issues) console.error(`config: ${issue.field}: ${issue.message}`);
      return 2;
    }
    throw err;
  }

  // Arguments after `npm test --`: flags go to node, anything else is a test file.
  const argv = process.argv.slice(2);
  const userFlags = argv.filter((a) => a.startsWith('-'));
  const userFiles = argv.filter((a) => !a.startsWith('-'));
  for (const f of userFiles) {
    if (!fs.existsSync(path.resolve(REPO_ROOT, f))) {
      console.error(`test: no such file: ${f}`);
      return 2;
    }
  }
  const files = userFiles.length ? userFiles : findTestFiles(TEST_DIR);
  if (files.length === 0) {
    say('no test files match test/**/*.test.ts; nothing to run');
    return 0;
  }

  const tools = readToolPaths();
  removeStaleRunDirs();
  fs.mkdirSync(RUN_DIR, { recursive: true });
  const temporalLog = fileLogger(path.join(RUN_DIR, 'temporal.log'));
  const s3Log = fileLogger(path.join(RUN_DIR, 's3.log'));

  const services: ManagedProcess[] = [];
  let runner: ReturnType<typeof spawn> | undefined;
  let interrupted: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = signal;
    say(`${signal}: stopping`);
    // On a terminal Ctrl-C the runner got SIGINT itself; forward for `kill <pid>` and the like.
    if (runner && runner.exitCode === null) runner.kill(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);

  let exitCode = 1;
  let summary: string[] = [];
  try {
    const [temporalPort, s3Port, fallbackPort] = (await freePorts(3)) as [number, number, number];
    const stackStart = Date.now();
    const [temporalResult, s3Result, fallbackResult] = await Promise.allSettled([
      startTemporal({ port: temporalPort, headless: true, log: temporalLog, temporalPath: tools.temporal }),
      startS3({
        port: s3Port,
        dataDir: path.join(RUN_DIR, 's3'),
        accessKey: config.S3_ACCESS_KEY_ID,
        secretKey: config.S3_SECRET_ACCESS_KEY,
        buckets: BUCKETS,
        log: s3Log,
        versitygwPath: tools.versitygw,
      }),
      startS3({
        port: fallbackPort,
        dataDir: path.join(RUN_DIR, 's3-fallback'),
        accessKey: config.S3_FALLBACK_ACCESS_KEY_ID,
        secretKey: config.S3_FALLBACK_SECRET_ACCESS_KEY,
        buckets: FALLBACK_BUCKETS,
        log: s3Log,
        versitygwPath: tools.versitygw,
      }),
    ]);
    for (const r of [temporalResult, s3Result, fallbackResult]) if (r.status === 'fulfilled') services.push(r.value);
    if (temporalResult.status === 'rejected') throw temporalResult.reason;
    if (s3Result.status === 'rejected') throw s3Result.reason;
    if (fallbackResult.status === 'rejected') throw fallbackResult.reason;
    const fallback = fallbackResult.value;
    const temporal = temporalResult.value;
    const s3 = s3Result.value;
    say(`stack up in ${formatMs(Date.now() - stackStart)}: temporal ${temporal.address}, s3 ${s3.endpoint}, fallback s3 ${fallback.endpoint}`);
    if (interrupted) return 130;

    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TEMPORAL_ADDRESS: temporal.address,
      TEMPORAL_CLI_PATH: tools.temporal,
      S3_ENDPOINT: s3.endpoint,
      S3_ACCESS_KEY_ID: config.S3_ACCESS_KEY_ID,
      S3_SECRET_ACCESS_KEY: config.S3_SECRET_ACCESS_KEY,
      S3_FALLBACK_ENDPOINT: fallback.endpoint,
      S3_FALLBACK_ACCESS_KEY_ID: config.S3_FALLBACK_ACCESS_KEY_ID,
      S3_FALLBACK_SECRET_ACCESS_KEY: config.S3_FALLBACK_SECRET_ACCESS_KEY,
      DATABASE_URL: process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/vidorch_test',
      NODE_ENV: 'test',
      // The test profile: the dev values fill in (production is what runs without it).
      VIDORCH_ENV: 'test',
      LOG_LEVEL: process.env.LOG_LEVEL || 'warn',
      VIDORCH_TEST_STACK: '1',
    };

    // Human-readable spec output on stdout; a TAP copy to a file whose closing `# tests/# pass/
    // # fail` lines are echoed as the very last lines, so every log (CI included) ends with them.
    const tapFile = path.join(RUN_DIR, 'results.tap');
    const reporterFlags = userFlags.some((f) => f.startsWith('--test-reporter'))
      ? []
      : ['--test-reporter=spec', '--test-reporter-destination=stdout', '--test-reporter=tap', `--test-reporter-destination=${tapFile}`];
    // --test-force-exit: a file whose tests have all finished ends even if a handle (a Redis
    // client, a pool) was left open, so a leak in a test's teardown cannot hang the whole run.
    // --test-timeout: a test or hook that hangs (a worker that never stops, a wait with no bound)
    // fails after 5 minutes (the longest test takes under a minute) with its name and output, instead of holding the run until CI's own
    // limit cuts it off with nothing but the list of files still pending.
    // test/support/property-limits.ts: every property test's runs are bounded in time.
    const args = [
      '--import',
      'tsx',
      '--import',
      './test/support/property-limits.ts',
      '--test',
      '--test-concurrency=2',
      '--test-force-exit',
      '--test-timeout=300000',
      ...reporterFlags,
      ...userFlags,
      ...files,
    ];
    const shownArgs = [...args.slice(0, args.length - files.length), files.length === 1 ? files[0] : `<${files.length} files>`];
    say(`${path.relative(REPO_ROOT, nodeBinary())} ${shownArgs.join(' ')}`);
    const suiteStart = Date.now();
    runner = spawn(nodeBinary(), args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'inherit', 'inherit'] });
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
      runner!.once('error', (err) => {
        console.error(`test: could not start the test runner: ${err.message}`);
        resolve([1, null]);
      });
      runner!.once('exit', (c, s) => resolve([c, s]));
    });
    exitCode = code ?? (signal === 'SIGINT' ? 130 : 1);
    if (fs.existsSync(tapFile)) {
      summary = fs
        .readFileSync(tapFile, 'utf8')
        .split('\n')
        .filter((l) => TAP_SUMMARY.test(l));
    }
    say(`suite wall time ${formatMs(Date.now() - suiteStart)} (total ${formatMs(Date.now() - started)}), exit code ${exitCode}`);
  } catch (err) {
    console.error(`test: ${err instanceof Error ? err.message : String(err)}`);
    exitCode = 1;
  } finally {
    await Promise.all(services.map((s) => s.stop('SIGTERM', 5_000)));
    await Promise.all([temporalLog.close(), s3Log.close()]);
    if (exitCode === 0 && !process.env.VIDORCH_KEEP_TEST_DATA) {
      fs.rmSync(RUN_DIR, { recursive: true, force: true });
    } else {
      say(`stack logs kept in ${path.relative(REPO_ROOT, RUN_DIR)}/`);
    }
  }
  // The runner's own TAP totals close the output (CI reads the last lines).
  if (summary.length) process.stdout.write(`${summary.join('\n')}\n`);
  return interrupted && exitCode === 0 ? 130 : exitCode;
}

process.exitCode = await main();
