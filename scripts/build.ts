// `npm run build`: the production build (docs/decisions/0065-build-and-images.md). Each entry
// point is bundled by esbuild into one ESM file in dist/ with our own code inlined and every
// package left to node_modules (installed with `npm ci --omit=dev`); the workflow code is
// bundled by the Temporal SDK (bundleWorkflowCode, as the worker does from sources) into
// dist/workflow-bundle*.js, which the built worker loads by path; the migrations are copied
// beside them (dist/migrate.js applies them, the API and the worker compare them with the
// database's). The build fails when an entry point imports a package that is not a runtime
// dependency, so `--omit=dev` cannot leave one out.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { build, type Metafile } from 'esbuild';
import { REPO_ROOT } from '../harness';
import { BUILT_WORKFLOW_BUNDLES, bundleWorkflows } from '../workers/generation-worker';
import { BUILD_ID_FILE } from '../workers/versioning';

/** dist/<name>.js ← source. The Dockerfile's targets and the start:* scripts run these. */
const ENTRY_POINTS = {
  api: 'api/server.ts',
  worker: 'workers/main.ts',
  ops: 'ops/cli.ts',
  migrate: 'db/migrate.ts',
  healthcheck: 'ops/healthcheck.ts',
} as const;

const DIST = path.join(REPO_ROOT, 'dist');

/** The package an import names (`@scope/name/sub` → `@scope/name`), or null for a Node builtin. */
function packageOf(specifier: string): string | null {
  if (specifier.startsWith('node:') || builtinModules.includes(specifier)) return null;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** Packages the bundles import that `npm ci --omit=dev` would not install, with the file importing each. */
async function notRuntimeDependencies(metafile: Metafile): Promise<string[]> {
  const manifest = JSON.parse(await fs.readFile(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
  };
  const runtime = new Set([...Object.keys(manifest.dependencies ?? {}), ...Object.keys(manifest.optionalDependencies ?? {})]);
  const wrong = new Set<string>();
  for (const [file, input] of Object.entries(metafile.inputs)) {
    for (const imp of input.imports) {
      const pkg = imp.external ? packageOf(imp.path) : null;
      if (pkg && !runtime.has(pkg)) wrong.add(`${pkg} (imported by ${file})`);
    }
  }
  return [...wrong].sort();
}

async function main(): Promise<void> {
  const started = Date.now();
  await fs.rm(DIST, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: REPO_ROOT,
    entryPoints: ENTRY_POINTS,
    outdir: DIST,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    // Every package stays in node_modules: native addons (the Temporal core bridge), pino's
    // worker-thread transports and the SDK's own files resolve there as they do from sources.
    packages: 'external',
    metafile: true,
    logLevel: 'warning',
    // Readable bundles (one `// path.ts` marker per module) give stack traces without source maps.
    minify: false,
    legalComments: 'none',
  });
  const wrong = await notRuntimeDependencies(result.metafile);
  if (wrong.length > 0) throw new Error(`the build imports packages that are not runtime dependencies:\n  ${wrong.join('\n  ')}`);

  // Made once here instead of by every worker start (STYLE.md "Shipping"); the SDK loads them by path.
  for (const [kind, file] of Object.entries(BUILT_WORKFLOW_BUNDLES)) {
    const { code } = await bundleWorkflows({ tracing: kind === 'tracing' });
    await fs.writeFile(path.join(DIST, file), code);
  }
  await fs.cp(path.join(REPO_ROOT, 'db', 'migrations'), path.join(DIST, 'migrations'), { recursive: true });
  // The worker's build id under Worker Versioning (workers/versioning.ts, docs/deploy.md): the
  // version and what the worker runs, so the same code is the same version and any change is a new one.
  const version = (JSON.parse(await fs.readFile(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  const hash = createHash('sha256');
  for (const file of ['worker.js', ...Object.values(BUILT_WORKFLOW_BUNDLES)]) hash.update(await fs.readFile(path.join(DIST, file)));
  const buildId = `${version}-${hash.digest('hex').slice(0, 12)}`;
  await fs.writeFile(path.join(DIST, BUILD_ID_FILE), `${buildId}\n`);

  const files = await fs.readdir(DIST);
  const sizes = await Promise.all(
    files.filter((f) => f.endsWith('.js')).map(async (f) => `${f} ${((await fs.stat(path.join(DIST, f))).size / 1024).toFixed(0)} KB`),
  );
  process.stdout.write(`build: dist/ in ${((Date.now() - started) / 1000).toFixed(1)} s: ${sizes.join(', ')}, migrations, build id ${buildId}\n`);
}

await main();
