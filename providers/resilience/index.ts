// Call-side resilience per provider (docs/design.md §6): breaker, retry budget, backoff, bulkhead.
export * from './backoff';
export * from './bulkhead';
export * from './circuit-breaker';
export * from './retry-budget';
export * from './hedge';
