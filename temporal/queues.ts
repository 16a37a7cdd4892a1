// Task queue names in one place. Workers poll them; the facade starts workflows on them; the
// workflow schedules provider reads on a provider's poll queue. Pure: safe in the workflow sandbox.
export const queues = {
  /** Generation workflows and their task activities. */
  generation: (base: string) => base,
  /**
   * One provider's reads (polls and reconciliation lookups). Its worker sets the queue's global
   * dispatch rate to the provider's query quota (docs/design.md §5 "Polling").
   */
  poll: (base: string, provider: string) => `${base}-poll-${provider}`,
  /** The reconciler workflows started by their Schedules, and their one activity (reconcilers/schedules.ts). */
  reconcile: (base: string) => `${base}-reconcile`,
} as const;
