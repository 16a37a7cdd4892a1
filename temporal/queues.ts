// Task queue names in one place. Workers poll them; the facade starts workflows on them; the
// workflow schedules provider reads on a provider's poll queue. Pure: safe in the workflow sandbox.
export const queues = {
  /** Generation workflows and their task activities; the reconciler Schedules' workflows too. */
  generation: (base: string) => base,
  /**
   * One provider's reads (polls and reconciliation lookups). Its worker sets the queue's global
   * dispatch rate to the provider's query quota (docs/design.md §5 "Polling").
   */
  poll: (base: string, provider: string) => `${base}-poll-${provider}`,
  /**
   * The reconciler workflows' one activity (reconcilers/schedules.ts); their workflows too in runs
   * started before they moved to the generation queue.
   */
  reconcile: (base: string) => `${base}-reconcile`,
} as const;
