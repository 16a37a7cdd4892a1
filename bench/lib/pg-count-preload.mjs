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
  // Two generations a kind, each at most GENERATION texts: a text found in the older one moves to
  // the newer, and a full newer generation becomes the older (the oldest dropped). The product's
  // framing statements carry the task id as a literal (db/task-tx.ts), so each task adds texts of
  // its own that never come back; an unbounded cache of them (the first had a cap of 10,000) held
  // about 50 MB of the worker's heap at 10,000 open tasks, inside the RSS the benchmark measures.
  // Bounded so: at most 2 × GENERATION texts a kind, a few MB, and the repeated texts stay cached.
  const GENERATION = 500;
  const parsed = [
    { young: new Map(), old: new Map() },
    { young: new Map(), old: new Map() },
  ];
  const remember = (cache, text, p) => {
    if (cache.young.size >= GENERATION) {
      cache.old = cache.young;
      cache.young = new Map();
    }
    cache.young.set(text, p);
    return p;
  };
  const parse = (text, split) => {
    const cache = parsed[split ? 1 : 0];
    let p = cache.young.get(text);
    if (p) return p;
    p = cache.old.get(text);
    if (p) {
      cache.old.delete(text);
      return remember(cache, text, p);
    }
    const parts = [];
    for (const part of split ? text.split(';') : [text]) {
      const verb = /^\s*(\w+)(?:\s+(\w+))?/.exec(part);
      if (!verb) continue;
      parts.push({ first: verb[1].toLowerCase(), second: verb[2] ? verb[2].toLowerCase() : '', key: part.replace(/\s+/g, ' ').trim().slice(0, 160) });
    }
    return remember(cache, text, { key: text.replace(/\s+/g, ' ').trim().slice(0, 160), parts });
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
