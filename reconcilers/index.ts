// The scheduled reconcilers (docs/design.md §8, docs/runbooks/reconcilers.md). Each runs as a
// Temporal Schedule (reconcilers/schedules.ts); adding one is one line here plus its interval
// in reconcilers/settings.ts.
import { assetsReconciler, outputRetentionReconciler } from './assets';
import { billingReconciler } from './billing';
import { callbacksReconciler } from './callbacks';
import { outboxReconciler } from './outbox';
import { outputReconciler } from './output';
import { providerReconciler } from './provider';
import { retentionReconciler } from './retention';
import { thumbnailsReconciler } from './thumbnails';
import type { Reconciler } from './types';

export const RECONCILERS: readonly Reconciler[] = [
  outboxReconciler,
  providerReconciler,
  callbacksReconciler,
  outputReconciler,
  thumbnailsReconciler,
  billingReconciler,
  retentionReconciler,
  assetsReconciler,
  outputRetentionReconciler,
];

export function reconcilerNamed(name: string, list: readonly Reconciler[] = RECONCILERS): Reconciler {
  const found = list.find((r) => r.name === name);
  if (!found) throw new Error(`no reconciler ${name}; one of ${list.map((r) => r.name).join(', ')}`);
  return found;
}

export type { Reconciler } from './types';
