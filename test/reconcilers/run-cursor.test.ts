// A paging reconciler's cursor (reconcilers/run.ts): each run starts where the latest real run
// stopped; a dry run and a failed run leave it where it was; a full pass (cursor null) starts the
// next run over.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { runReconciler } from '../../reconcilers/run';
import type { ReconcileDeps, Reconciler, ReconcileRunOptions } from '../../reconcilers/types';
import { createTestDatabase, testConfig, testLogger, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
before(async () => {
  tdb = await createTestDatabase(testConfig());
});
after(async () => {
  await tdb?.drop();
});

test('a paging reconciler goes on from the last real run; dry and failed runs keep the cursor; a full pass starts over', async () => {
  // Pages of 2 over the items a..e; fails when told to.
  const items = ['a', 'b', 'c', 'd', 'e'];
  const seen: Array<ReconcileRunOptions['cursor']> = [];
  let failNext = false;
  const paging: Reconciler = {
    name: 'paging-test',
    async run(_deps, opts) {
      seen.push(opts.cursor ?? null);
      if (failNext) throw new Error('storage went away');
      const from = opts.cursor?.['at'] ? items.indexOf(opts.cursor['at']) + 1 : 0;
      const page = items.slice(from, from + opts.limit);
      const more = from + page.length < items.length;
      return { examined: page.length, findings: [], changed: 0, cursor: more ? { at: page.at(-1)! } : null };
    },
  };
  const deps = { db: tdb.database.db, logger: testLogger } as unknown as ReconcileDeps;
  const run = (dryRun: boolean) => runReconciler(deps, paging, { dryRun, limit: 2, actor: 'test' });

  await run(false); // a, b
  await run(true); // c, d — a dry run: the cursor stays at b
  await run(false); // c, d
  failNext = true;
  await assert.rejects(run(false), /storage went away/);
  failNext = false;
  await run(false); // e, and the pass is complete
  await run(false); // a, b again
  assert.deepEqual(seen, [null, { at: 'b' }, { at: 'b' }, { at: 'd' }, { at: 'd' }, null]);
});
