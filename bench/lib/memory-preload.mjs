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
  // glibc's malloc heaps, from /proc/self/smaps (read every tenth flush: a V8 process has
  // thousands of mappings). The main arena is the brk heap ("[heap]"). Every other arena is a
  // chain of heaps, each a 64 MiB (HEAP_MAX_SIZE) reservation aligned to 64 MiB whose used part
  // is read-write and the rest PROT_NONE: an anonymous rw mapping on a 64 MiB boundary whose
  // size, with the ---p mapping right after it, is a multiple of 64 MiB (the kernel merges
  // heaps that lie side by side into one mapping). Everything else anonymous (V8's
  // pages, stacks, allocations above the mmap threshold) is left out. It tells the allocator's
  // share of native memory from the rest.
  const ARENA = 64n * 1024n * 1024n;
  let smaps = null;
  let flushes = 0;
  const readSmaps = () => {
    const maps = [];
    for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
      const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
      if (head)
        maps.push({
          start: BigInt(`0x${head[1]}`),
          end: BigInt(`0x${head[2]}`),
          perms: head[3],
          anon: head[4] === '0' && head[5] === '',
          name: head[5],
          rss: 0,
        });
      else if (line.startsWith('Rss:') && maps.length) maps[maps.length - 1].rss = Number(/(\d+)/.exec(line)[1]) * 1024;
    }
    let brkHeap = 0;
    let arenaHeaps = 0;
    maps.forEach((m, i) => {
      if (m.name === '[heap]') brkHeap += m.rss;
      else if (m.anon && m.perms.startsWith('rw') && m.start % ARENA === 0n) {
        const next = maps[i + 1];
        const size = m.end - m.start;
        const reserved = next && next.start === m.end && next.perms.startsWith('---') ? size + (next.end - next.start) : size;
        if (reserved % ARENA === 0n) arenaHeaps += m.rss;
      }
    });
    return { brkHeap, arenaHeaps };
  };
  let busy = false;
  const flush = async () => {
    if (busy) return;
    busy = true;
    try {
      if (flushes++ % 10 === 0) {
        try {
          smaps = readSmaps();
        } catch {
          smaps = null;
        }
      }
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
        malloc: smaps,
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
