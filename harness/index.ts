// The harness of the local stack, shared by `npm run dev` / `npm test` (scripts/), the tests,
// the drills and the benchmarks: tool lookup, ports, child processes, a Temporal dev server,
// an S3 server, and the world builder (database, simulator, API, workers).
export * from './tools';
export * from './ports';
export * from './processes';
export * from './temporal';
export * from './s3';
