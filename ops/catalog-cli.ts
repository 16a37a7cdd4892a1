// `ops catalog …`: sync the catalog with its providers' published schemas, and re-enable a route
// held after a breaking change (ops/catalog-sync.ts; docs/runbooks/providers.md "Schema changes").
import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { Db } from '../db/client';
import { PROVIDERS } from '../domain/catalog';
import { applySync, enableRoute, syncCatalog, type Applied, type ModelSync, type SchemaSources } from './catalog-sync';

export interface CatalogCliDeps {
  readonly withDb: <T>(work: (d: { db: Db }) => Promise<T>) => Promise<T>;
  readonly sources: SchemaSources;
  readonly actor: string;
}

const provider = (value: string): string => {
  if (!(PROVIDERS as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${PROVIDERS.join(', ')}`);
  return value;
};

const STATUS_TEXT: Record<ModelSync['status'], string> = {
  'up-to-date': 'up to date',
  unrecorded: 'not recorded yet (takes everything the catalog sends)',
  changed: 'changed (additive: the catalog is unaffected)',
  breaking: 'BREAKING: what the catalog sends no longer fits',
  skipped: 'skipped',
  error: 'could not be read',
};

/** The readable report: one block per model, its diff and what breaks. */
export function printSync(results: readonly ModelSync[], applied: readonly Applied[] | null): string {
  const lines: string[] = [];
  for (const r of results) {
    lines.push(`${r.provider} ${r.model} (${r.entries.join(', ')}): ${STATUS_TEXT[r.status]}`);
    if (r.note) lines.push(`  ${r.note}`);
    if (r.version && r.storedVersion !== r.version && r.status !== 'up-to-date') lines.push(`  version ${r.storedVersion ?? '(none recorded)'} → ${r.version}`);
    if (r.status !== 'unrecorded') for (const c of r.changes ?? []) lines.push(`  ${c.path}: ${c.kind} ${c.detail}`);
    for (const b of r.breaks ?? []) lines.push(`  ! ${b}`);
    if (r.held) lines.push(`  route held since ${r.held.since.toISOString()}: ops catalog enable ${r.provider} ${r.model} --reason … after review`);
    const a = applied?.find((x) => x.provider === r.provider && x.model === r.model);
    if (a) lines.push(`  recorded revision ${a.revisionId}${a.held ? '; route held until an operator re-enables it' : ''}; audit ${a.auditIds.join(', ')}`);
  }
  const pending = results.filter((r) => ['changed', 'breaking', 'unrecorded'].includes(r.status)).length;
  if (applied === null && pending > 0) lines.push(`${pending} model(s) to record: ops catalog sync --apply`);
  if (pending === 0 && results.every((r) => r.status === 'up-to-date' || r.status === 'skipped')) lines.push('catalog up to date');
  return lines.join('\n');
}

async function confirmed(question: string): Promise<boolean> {
  if (!process.stdin.isTTY) throw new Error('--apply asks for confirmation on a terminal: pass --yes to apply without one');
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}

export function registerCatalogCommands(program: Command, deps: CatalogCliDeps): void {
  const catalog = program.command('catalog').description("the catalog against its providers' published model schemas (docs/decisions/0072)");
  catalog
    .command('sync')
    .description("read each model's published input schema, show what changed and what breaks; --apply records it and holds broken routes")
    .option('--provider <name>', PROVIDERS.join(' | '), provider)
    .option('--apply', 'record the new revisions (audited) and hold the routes a change breaks', false)
    .option('--yes', 'apply without asking (scripts)', false)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { provider?: string; apply: boolean; yes: boolean; json: boolean }) => {
      const out = await deps.withDb(async ({ db }) => {
        const results = await syncCatalog(db, deps.sources, o.provider ? { provider: o.provider } : {});
        const pending = results.filter((r) => ['changed', 'breaking', 'unrecorded'].includes(r.status));
        if (!o.apply || pending.length === 0) return { results, applied: o.apply ? [] : null };
        if (!o.yes) {
          console.error(printSync(results, null));
          if (!(await confirmed(`Record ${pending.length} revision(s), holding ${pending.filter((r) => r.status === 'breaking').length} route(s)?`))) {
            return { results, applied: null };
          }
        }
        return { results, applied: await applySync(db, results, deps.actor) };
      });
      const json = { models: out.results.map(({ inputSchema: _schema, ...r }) => r), applied: out.applied };
      console.log(o.json ? JSON.stringify(json) : printSync(out.results, out.applied));
      if (out.results.some((r) => r.status === 'error')) process.exitCode = 1;
    });
  catalog
    .command('enable')
    .description('re-enable a route held after a breaking schema change, once the catalog and its request builder fit the new schema')
    .argument('<provider>', PROVIDERS.join(' | '), provider)
    .argument('<model>', "the provider's model id, e.g. minimax/video-01")
    .requiredOption('--reason <text>', 'why (audited)')
    .option('--json', 'print one JSON line', false)
    .action(async (p: string, model: string, o: { reason: string; json: boolean }) => {
      const r = await deps.withDb(({ db }) => enableRoute(db, { provider: p, model, actor: deps.actor, reason: o.reason }));
      console.log(o.json ? JSON.stringify({ provider: p, model, enabled: true, audit_id: r.auditId }) : `${p} ${model}: enabled; audit ${r.auditId}`);
    });
}
