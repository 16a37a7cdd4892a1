// Hands a worker's free memory back to the system after a burst (WORKER_MALLOC_TRIM_INTERVAL_MS,
// WORKER_HEAP_COMPACTION; docs/decisions/0058-worker-malloc-trim.md, 0060-worker-heap-compaction.md).
//
// Two allocators keep a burst's pages while the worker's tasks wait:
// - glibc's malloc returns memory to the system only from the top of each heap. A burst (thousands
//   of tasks taken in, the Temporal core replaying evicted runs) leaves free chunks in the middle
//   of its heaps, resident for the life of the process. malloc_trim(0) gives back every whole free
//   page of every arena. Node has no binding for it, so it is called through koffi (a prebuilt
//   FFI library) on libuv's thread pool.
// - V8 keeps the old-generation pages a burst emptied until its memory reducer runs, and that waits
//   for an isolate with a low allocation rate: a worker polling its tasks never has one. V8's
//   memory-reducing collection (two or more full GCs that compact and release the emptied pages,
//   what a low-memory notification runs) gives them back.
//
// What each costs: a trim holds each arena's lock while it walks that arena, so a thread that
// allocates meanwhile (the event loop included) waits for it, up to ~0.5 s measured right after a
// burst; the compaction runs on the main thread, ~0.45 s for the worker's heap at 10,000 tasks. So a tick
// reads cheap figures first and does each only when it has something to give back (the gates
// below, pure, so their rules are tested on their own); a worker at rest is not stalled for nothing.

import fs from 'node:fs';
import { createRequire } from 'node:module';
import v8 from 'node:v8';
import vm from 'node:vm';

/** A tick gives back only once this much has been freed (malloc) or emptied (V8's old generation) since the last time. */
export const GIVE_BACK_MIN_BYTES = 16 * 2 ** 20;
/** A compaction that gave back less than GIVE_BACK_MIN_BYTES doubles the emptying the next one waits for, up to this. */
const COMPACTION_GROWTH_MAX_BYTES = 256 * 2 ** 20;

// ---- The gates ----

/** What a tick reads. */
export interface Readings {
  /** RssAnon; null where /proc is missing. */
  readonly anonBytes: number | null;
  /** mallinfo2's fordblks: bytes in malloc's free chunks, all arenas, whether still resident or already given back; null without mallinfo2. */
  readonly mallocFreeBytes: number | null;
  /** The main isolate's old generation, resident bytes holding nothing (heapUnusedBytes). */
  readonly heapUnusedBytes: number;
}

export interface GateState {
  /** Since the last trim, the lowest readings; null: no trim yet (the first tick trims). */
  readonly lowestAnon: number | null;
  readonly lowestFree: number | null;
  /** Since the last compaction (from the tick after it, or the start), the lowest unused-heap reading; null: take the next. */
  readonly lowestUnused: number | null;
  /** The emptying the next compaction waits for: GIVE_BACK_MIN_BYTES, doubled after each compaction that gave back less. */
  readonly compactionGrowth: number;
}

export const initialGateState = (): GateState => ({ lowestAnon: null, lowestFree: null, lowestUnused: null, compactionGrowth: GIVE_BACK_MIN_BYTES });

/**
 * Whether V8's heap is worth compacting: its old generation has emptied `compactionGrowth` more
 * than its lowest reading since the last compaction. The baseline is not taken right after a
 * compaction (that is a floor the next ordinary GC leaves behind at once) but at the next tick.
 */
export function compactionDue(state: GateState, r: Readings): { due: boolean; state: GateState } {
  if (state.lowestUnused === null) return { due: false, state: { ...state, lowestUnused: r.heapUnusedBytes } };
  const lowestUnused = Math.min(state.lowestUnused, r.heapUnusedBytes);
  return { due: r.heapUnusedBytes - lowestUnused >= state.compactionGrowth, state: { ...state, lowestUnused } };
}

/** After a compaction that gave back `releasedBytes`: a new baseline at the next tick, and the back-off. */
export function afterCompaction(state: GateState, releasedBytes: number): GateState {
  const compactionGrowth = releasedBytes >= GIVE_BACK_MIN_BYTES ? GIVE_BACK_MIN_BYTES : Math.min(COMPACTION_GROWTH_MAX_BYTES, state.compactionGrowth * 2);
  return { ...state, lowestUnused: null, compactionGrowth };
}

/**
 * Whether glibc's heaps are worth trimming: the first tick; malloc's free bytes 16 MB above their
 * lowest since the last trim (that much was freed: a burst's end, which grows nothing); or
 * anonymous memory 16 MB above its lowest with 16 MB free in the heaps (a burst that came and
 * went between two ticks, reusing chunks an earlier trim gave back: the free bytes look unchanged,
 * but those pages are resident again). Without mallinfo2, growth alone, as before it.
 */
export function trimDue(state: GateState, r: Readings): { due: boolean; state: GateState } {
  if (state.lowestAnon === null && state.lowestFree === null) return { due: true, state };
  const lowestAnon = r.anonBytes === null ? state.lowestAnon : Math.min(state.lowestAnon ?? r.anonBytes, r.anonBytes);
  const lowestFree = r.mallocFreeBytes === null ? state.lowestFree : Math.min(state.lowestFree ?? r.mallocFreeBytes, r.mallocFreeBytes);
  const freed = r.mallocFreeBytes !== null && lowestFree !== null && r.mallocFreeBytes - lowestFree >= GIVE_BACK_MIN_BYTES;
  const grown =
    r.anonBytes !== null &&
    lowestAnon !== null &&
    r.anonBytes - lowestAnon >= GIVE_BACK_MIN_BYTES &&
    (r.mallocFreeBytes === null || r.mallocFreeBytes >= GIVE_BACK_MIN_BYTES);
  return { due: freed || grown, state: { ...state, lowestAnon, lowestFree } };
}

/** After a trim: the readings right after it are the new lowest. */
export function afterTrim(state: GateState, r: Readings): GateState {
  return { ...state, lowestAnon: r.anonBytes ?? 0, lowestFree: r.mallocFreeBytes ?? 0 };
}

// ---- The process's allocators ----

interface Koffi {
  load(path: string): { func(signature: string): KoffiFunc; func(name: string, result: unknown, args: unknown[]): KoffiFunc };
  struct(fields: Record<string, string>): unknown;
}
type KoffiFunc = ((...args: unknown[]) => unknown) & { async(...args: unknown[]): void };

interface Glibc {
  /** malloc_trim(0) on libuv's thread pool. */
  readonly trim: () => Promise<void>;
  /** mallinfo2's fordblks; null where glibc predates it (2.33). */
  readonly freeBytes: (() => number) | null;
}

let glibcBound: Glibc | null | undefined;

/**
 * glibc's malloc_trim (and mallinfo2 where present), or null where there is none: not Linux, a
 * libc without it (musl), or no koffi binary for this platform. koffi is required here, not
 * imported, so a platform it has no prebuilt binary for runs without the trim instead of failing
 * at start-up. Bound once a process.
 */
function glibc(): Glibc | null {
  if (glibcBound !== undefined) return glibcBound;
  glibcBound = null;
  if (process.platform !== 'linux') return null;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as Koffi;
    const libc = koffi.load('libc.so.6');
    const mallocTrim = libc.func('int malloc_trim(size_t pad)');
    let freeBytes: (() => number) | null = null;
    try {
      const fields = ['arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost'];
      const mallinfo2 = libc.func('mallinfo2', koffi.struct(Object.fromEntries(fields.map((f) => [f, 'size_t']))), []);
      freeBytes = () => Number((mallinfo2() as { fordblks: number | bigint }).fordblks);
    } catch {
      // glibc before 2.33: trims gate on growth alone.
    }
    glibcBound = {
      trim: () =>
        new Promise((resolve, reject) =>
          mallocTrim.async(0, (err: unknown) => (err ? reject(err instanceof Error ? err : new Error('malloc_trim failed')) : resolve())),
        ),
      freeBytes,
    };
  } catch {
    glibcBound = null;
  }
  return glibcBound;
}

let compactionBound: (() => void) | null | undefined;

/**
 * This isolate's memory-reducing collection: V8's gc extension with the 'last-resort' flavour.
 * Node exposes the extension only under --expose-gc, so the flag is set for the moment it takes to
 * make one context, and that context's gc function kept; a context made after has no gc global.
 * That moment must come before any worker thread makes contexts (the Temporal SDK's workflow
 * thread): both worker mains start this before they create their Worker. An older V8 that ignores
 * the flavour runs one plain full GC instead. Bound once a process.
 */
function heapCompaction(): (() => void) | null {
  if (compactionBound !== undefined) return compactionBound;
  compactionBound = null;
  try {
    let gc = (globalThis as { gc?: unknown }).gc;
    if (typeof gc !== 'function') {
      v8.setFlagsFromString('--expose-gc');
      try {
        gc = vm.runInNewContext('gc') as unknown;
      } finally {
        v8.setFlagsFromString('--no-expose-gc');
      }
    }
    if (typeof gc === 'function') {
      const collect = gc as (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
      compactionBound = () => collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    }
  } catch {
    compactionBound = null;
  }
  return compactionBound;
}

/** The main isolate's old generation, resident bytes holding nothing (every space but the young generation's, which each scavenge empties). */
export function heapUnusedBytes(): number {
  let unused = 0;
  for (const s of v8.getHeapSpaceStatistics())
    if (s.space_name !== 'new_space' && s.space_name !== 'new_large_object_space') unused += Math.max(0, s.physical_space_size - s.space_used_size);
  return unused;
}

/** RssAnon from /proc/self/status, bytes; null where there is none. */
export function anonymousRss(): number | null {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

// ---- The timer ----

export interface TrimOutcome {
  /** Anonymous resident memory given back by the compaction and the trim, RssAnon before and after (≥ 0; other threads allocate meanwhile). */
  readonly releasedBytes: number;
  /** The malloc trim, from the call to its answer (the wait for a thread-pool thread included); null: none this time. */
  readonly seconds: number | null;
  /** The heap compaction, on the main thread; null: none this time. */
  readonly compactionSeconds: number | null;
}

export interface MallocTrimmer {
  /** What this process can do: glibc's trim, its free-bytes reading (mallinfo2), V8's compaction. */
  readonly available: { readonly trim: boolean; readonly mallocFreeBytes: boolean; readonly compaction: boolean };
  /** One tick now: reads, then does what the gates say; null when nothing was due or a give-back is running. */
  tick(): Promise<TrimOutcome | null>;
  /** Compacts and trims now, whatever the gates; null when a give-back is already running. */
  trimNow(): Promise<TrimOutcome | null>;
  stop(): void;
}

export interface TrimHooks {
  /** Each give-back's outcome. */
  readonly onTrim?: (outcome: TrimOutcome) => void;
  /** A tick that failed (the timer carries on). */
  readonly onError?: (err: unknown) => void;
}

export interface TrimOptions {
  /** Whether ticks may compact V8's heap (WORKER_HEAP_COMPACTION; default true). */
  readonly compactHeap?: boolean;
}

/**
 * Starts a timer that, every `intervalMs`, gives back what a burst left (the gates above). Null
 * when `intervalMs` is 0 or this process can do neither a trim nor a compaction. The timer does
 * not keep the process alive.
 */
export function startMallocTrimmer(intervalMs: number, hooks: TrimHooks = {}, options: TrimOptions = {}): MallocTrimmer | null {
  if (intervalMs <= 0) return null;
  const libc = glibc();
  const compact = options.compactHeap === false ? null : heapCompaction();
  if (!libc && !compact) return null;
  const read = (): Readings => ({ anonBytes: anonymousRss(), mallocFreeBytes: libc?.freeBytes?.() ?? null, heapUnusedBytes: heapUnusedBytes() });
  let state = initialGateState();
  let running = false;

  const giveBack = async (force: boolean): Promise<TrimOutcome | null> => {
    if (running) return null;
    running = true;
    try {
      let r = read();
      const before = r.anonBytes;
      /** Runs one step, timed; whether it ends or throws, the readings after it are taken. Its seconds. */
      const step = async (run: () => void | Promise<void>): Promise<number> => {
        const t0 = performance.now();
        try {
          await run();
        } finally {
          r = read();
        }
        return (performance.now() - t0) / 1000;
      };
      let compactionSeconds: number | null = null;
      if (compact) {
        const gate = compactionDue(state, r);
        state = gate.state;
        if (force || gate.due) {
          try {
            compactionSeconds = await step(compact);
          } finally {
            state = afterCompaction(state, before !== null && r.anonBytes !== null ? before - r.anonBytes : 0);
          }
        }
      }
      let seconds: number | null = null;
      if (libc) {
        const gate = trimDue(state, r);
        state = gate.state;
        if (force || gate.due) {
          try {
            seconds = await step(libc.trim);
          } finally {
            state = afterTrim(state, r);
          }
        }
      }
      if (compactionSeconds === null && seconds === null) return null;
      const after = r.anonBytes;
      const outcome = { releasedBytes: before !== null && after !== null ? Math.max(0, before - after) : 0, seconds, compactionSeconds };
      hooks.onTrim?.(outcome);
      return outcome;
    } finally {
      running = false;
    }
  };

  const timer = setInterval(() => {
    giveBack(false).catch((err: unknown) => hooks.onError?.(err));
  }, intervalMs);
  timer.unref();
  return {
    available: { trim: libc !== null, mallocFreeBytes: libc?.freeBytes != null, compaction: compact !== null },
    tick: () => giveBack(false),
    trimNow: () => giveBack(true),
    stop: () => clearInterval(timer),
  };
}
