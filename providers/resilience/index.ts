// Call-side resilience per provider (docs/design.md §6): breaker, retry budget, bulkhead.
export * from './bulkhead';
export * from './circuit-breaker';
export * from './retry-budget';
