// The stored outputs' reconcilers (docs/decisions/0029), as Schedules like the others:
// `assets` copies objects rescued to the fallback bucket back to the primary once it answers and
// reports asset rows without their object, objects without their row and checksum mismatches;
// `output-retention` deletes the outputs of tasks past their tenant's output retention. Both are
// the same functions `ops assets` and `ops expire-outputs` run by hand.
import { acquireFence } from '../db/fence';
import { reconcileAssets } from '../storage/asset-reconciler';
import { expireOutputs } from '../storage/output-lifecycle';
import type { ReconcileDeps, Reconciler } from './types';

const fenceToken = async (deps: ReconcileDeps) => (await acquireFence(deps.db, deps.fence.scope, deps.fence.region)).token;

export const assetsReconciler: Reconciler = {
  name: 'assets',
  run: (deps, opts) => reconcileAssets({ db: deps.db, storage: deps.storage, fallbackStorage: deps.fallbackStorage, token: () => fenceToken(deps) }, opts),
};

export const outputRetentionReconciler: Reconciler = {
  name: 'output-retention',
  run: (deps, opts) =>
    expireOutputs(
      {
        db: deps.db,
        stores: { storage: deps.storage, fallbackStorage: deps.fallbackStorage },
        token: () => fenceToken(deps),
        now: () => new Date(),
        defaultDays: deps.settings.outputRetentionDays,
      },
      opts,
    ),
};
