// Task queue names in one place. Workers poll them; the facade starts workflows on them.
export const queues = {
  /** Generation workflows and their task activities. */
  generation: (base: string) => base,
} as const;
