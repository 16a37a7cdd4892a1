// Preloaded into API and worker processes by the benchmarks (NODE_OPTIONS=--import=<this file>,
// BENCH_PG_COUNT_FILE=<path>): counts every Postgres round trip made through pg.Client#query,
// per statement text, and the transactions they end (an explicit COMMIT, or a statement sent
// outside a transaction, which Postgres commits on its own), and writes the tally to the file
// twice a second and at exit. Product code is untouched; without BENCH_PG_COUNT_FILE this does
// nothing. Plain JavaScript because it loads before tsx.
import fs from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import pg from 'pg';

// Main thread only: module-loader hook threads (tsx) load this too and would overwrite the file.
const file = isMainThread ? process.env.BENCH_PG_COUNT_FILE : undefined;
if (file) {
  const counts = new Map();
  let total = 0;
  let commits = 0;
  let rollbacks = 0;
  // Commits by what the transaction did first: its first statement after BEGIN, or the
  // statement itself when sent outside a transaction (so a timer loop's commits can be told
  // from a task's). Counted when sent; a COMMIT of a failed transaction (Postgres rolls it
  // back) still counts as a commit, which the benchmarks accept.
  const commitsBy = new Map();
  // Per connection: inside BEGIN … COMMIT/ROLLBACK, the transaction's first statement ('' until one is sent).
  const open = new WeakMap();
  const commit = (key) => {
    commits += 1;
    commitsBy.set(key, (commitsBy.get(key) || 0) + 1);
  };
  // A statement's key and its parts' verbs, worked out once per statement text (the API sends
  // the same few texts thousands of times a second: the regexes would be the preload's own cost
  // inside the process it measures, docs/performance.md "callbacks").
  const parsed = [new Map(), new Map()];
  const parse = (text, split) => {
    const cache = parsed[split ? 1 : 0];
    let p = cache.get(text);
    if (p) return p;
    const parts = [];
    for (const part of split ? text.split(';') : [text]) {
      const verb = /^\s*(\w+)(?:\s+(\w+))?/.exec(part);
      if (!verb) continue;
      parts.push({ first: verb[1].toLowerCase(), second: verb[2] ? verb[2].toLowerCase() : '', key: part.replace(/\s+/g, ' ').trim().slice(0, 160) });
    }
    p = { key: text.replace(/\s+/g, ' ').trim().slice(0, 160), parts };
    if (cache.size < 10_000) cache.set(text, p);
    return p;
  };
  const original = pg.Client.prototype.query;
  pg.Client.prototype.query = function countedQuery(config, values, callback) {
    const text = typeof config === 'string' ? config : (config && config.text) || '';
    total += 1;
    // A simple-protocol message may carry several statements ("BEGIN; SELECT …", "SELECT …; COMMIT",
    // db/task-tx.ts): one round trip, each statement tracked in order. Ours carry no ';' in literals.
    const given = values !== undefined && typeof values !== 'function' ? values : config && config.values;
    const { key, parts } = parse(text, !given || (Array.isArray(given) && given.length === 0));
    counts.set(key, (counts.get(key) || 0) + 1);
    for (const { first, second, key: partKey } of parts) {
      if (first === 'begin' || (first === 'start' && second === 'transaction')) open.set(this, '');
      else if (first === 'commit' || first === 'end') {
        commit(`tx: ${open.get(this) || '(empty)'}`);
        open.delete(this);
      } else if (first === 'rollback' && second !== 'to') {
        rollbacks += 1;
        open.delete(this);
      } else if (!open.has(this)) commit(partKey);
      else if (open.get(this) === '') open.set(this, partKey);
    }
    return original.call(this, config, values, callback);
  };
  const flush = () => {
    try {
      fs.writeFileSync(
        `${file}.tmp`,
        JSON.stringify({ pid: process.pid, total, commits, rollbacks, statements: Object.fromEntries(counts), commitsBy: Object.fromEntries(commitsBy) }),
      );
      fs.renameSync(`${file}.tmp`, file);
    } catch {
      // best effort
    }
  };
  setInterval(flush, 500).unref();
  process.on('exit', flush);
}
