// What a reconciler run reports (docs/design.md §8, reconcilers/types.ts): plain data, so the
// checks that live below reconcilers/ (storage/asset-reconciler.ts, storage/output-lifecycle.ts)
// and the run's row (db/schema.ts reconcile_run) share it without importing upwards.

/** Where a paging reconciler stopped: its own named positions. */
export type ReconcileCursor = Readonly<Record<string, string>>;

export interface ReconcileFinding {
  /** What was found, a stable word per reconciler (e.g. `unpublished-outbox`, `open-reservation`). */
  readonly kind: string;
  readonly taskId?: string;
  /** The row or object it is about when not a task (an outbox event id, an object key). */
  readonly key?: string;
  /** What was seen and what the run did about it, for a person. */
  readonly detail: string;
}

export interface ReconcileReport {
  /** Rows, tasks or objects looked at. */
  readonly examined: number;
  readonly findings: ReconcileFinding[];
  /** Facts this run changed or workflows it started or woke (0 on a dry run). */
  readonly changed: number;
  /**
   * A reconciler that pages (more to look at than `limit` a run): where the next run goes on;
   * null or absent after a full pass, so the next run starts over.
   */
  readonly cursor?: ReconcileCursor | null;
}
