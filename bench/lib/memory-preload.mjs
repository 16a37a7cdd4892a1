// Preloaded into worker processes by the open-tasks benchmark (NODE_OPTIONS=--import=<this file>,
// BENCH_MEMORY_FILE=<path>): where the process's memory is, written to the file as JSON once a
// second — RSS split into anonymous and file-backed pages (/proc/self/status), the main
// thread's V8 heap, and the heap of every worker thread the process starts (the Temporal SDK's
// workflow thread: worker_threads.Worker is wrapped so its threads can be asked,
// `worker.getHeapStatistics()`). What is anonymous and in no V8 heap is native memory: the
// SDK's Rust core, Node's and V8's own mallocs, external buffers, the allocator's free pages.
// Product code is untouched; without BENCH_MEMORY_FILE this does nothing. Plain JavaScript
// because it loads before tsx.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import v8 from 'node:v8';
import { isMainThread } from 'node:worker_threads';

const file = isMainThread ? process.env.BENCH_MEMORY_FILE : undefined;
if (file) {
  // The SDK requires the CommonJS module and reads `.Worker` when it starts a thread.
  const wt = createRequire(import.meta.url)('node:worker_threads');
  const threads = [];
  const Original = wt.Worker;
  wt.Worker = class CountedWorker extends Original {
    constructor(filename, options) {
      super(filename, options);
      const name = typeof filename === 'string' && !options?.eval ? path.basename(filename).replace(/\.[cm]?js$/, '') : 'eval';
      const entry = { name, worker: this, alive: true };
      threads.push(entry);
      this.once('exit', () => {
        entry.alive = false;
      });
    }
  };
  const kb = (status, key) => {
    const m = new RegExp(`${key}:\\s+(\\d+) kB`).exec(status);
    return m ? Number(m[1]) * 1024 : null;
  };
  const heap = (s) => ({
    used: s.used_heap_size,
    total: s.total_heap_size,
    physical: s.total_physical_size,
    external: s.external_memory,
    malloced: s.malloced_memory,
  });
  let busy = false;
  const flush = async () => {
    if (busy) return;
    busy = true;
    try {
      const status = fs.readFileSync('/proc/self/status', 'utf8');
      const mem = process.memoryUsage();
      const out = {
        pid: process.pid,
        at: Date.now(),
        rss: kb(status, 'VmRSS'),
        rssAnon: kb(status, 'RssAnon'),
        rssFile: kb(status, 'RssFile'),
        rssShmem: kb(status, 'RssShmem'),
        main: { ...heap(v8.getHeapStatistics()), arrayBuffers: mem.arrayBuffers },
        threads: [],
      };
      for (const t of threads) {
        if (!t.alive) continue;
        try {
          out.threads.push({ name: t.name, ...heap(await t.worker.getHeapStatistics()) });
        } catch {
          // the thread exited meanwhile
        }
      }
      fs.writeFileSync(`${file}.tmp`, JSON.stringify(out));
      fs.renameSync(`${file}.tmp`, file);
    } catch {
      // best effort
    } finally {
      busy = false;
    }
  };
  setInterval(() => void flush(), 1_000).unref();
}
