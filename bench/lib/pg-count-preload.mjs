// Preloaded into API and worker processes by the benchmarks (NODE_OPTIONS=--import=<this file>,
// BENCH_PG_COUNT_FILE=<path>): counts every Postgres round trip made through pg.Client#query,
// per statement text, and writes the tally to the file twice a second and at exit. Product
// code is untouched; without BENCH_PG_COUNT_FILE this does nothing. Plain JavaScript because it
// loads before tsx.
import fs from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import pg from 'pg';

// Main thread only: module-loader hook threads (tsx) load this too and would overwrite the file.
const file = isMainThread ? process.env.BENCH_PG_COUNT_FILE : undefined;
if (file) {
  const counts = new Map();
  let total = 0;
  const original = pg.Client.prototype.query;
  pg.Client.prototype.query = function countedQuery(config, values, callback) {
    const text = typeof config === 'string' ? config : (config && config.text) || '';
    total += 1;
    const key = text.replace(/\s+/g, ' ').trim().slice(0, 160);
    counts.set(key, (counts.get(key) || 0) + 1);
    return original.call(this, config, values, callback);
  };
  const flush = () => {
    try {
      fs.writeFileSync(`${file}.tmp`, JSON.stringify({ pid: process.pid, total, statements: Object.fromEntries(counts) }));
      fs.renameSync(`${file}.tmp`, file);
    } catch {
      // best effort
    }
  };
  setInterval(flush, 500).unref();
  process.on('exit', flush);
}
