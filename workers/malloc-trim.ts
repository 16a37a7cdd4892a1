// Hands the C allocator's free pages back to the system now and then (WORKER_MALLOC_TRIM_INTERVAL_MS).
//
// glibc's malloc returns memory to the system only from the top of each heap. A burst of work
// (thousands of tasks taken in, the Temporal core replaying evicted runs) leaves free chunks in
// the middle of its heaps, and those pages stay resident for the life of the process:
// the worker keeps its burst-time size while its tasks wait. malloc_trim(0) gives back every whole
// free page of every arena. Node has no binding for it, so it is called through koffi (a
// prebuilt FFI library), on libuv's thread pool so the event loop never waits for it.
// Why a periodic trim and not another allocator: docs/decisions/0058-worker-malloc-trim.md.
import fs from 'node:fs';
import koffi from 'koffi';

export interface TrimOutcome {
  /** Anonymous resident memory given back, as /proc/self/status saw it before and after (≥ 0; other threads allocate meanwhile). */
  readonly releasedBytes: number;
  readonly seconds: number;
}

export interface MallocTrimmer {
  /** Trims once now (the timer's work); null when a trim is already running. */
  trimNow(): Promise<TrimOutcome | null>;
  stop(): void;
}

type TrimCall = (pad: number, done: (err: unknown, released: number) => void) => void;

/** glibc's malloc_trim, or null where there is none (not Linux, or a libc without it such as musl's). */
function loadMallocTrim(): TrimCall | null {
  if (process.platform !== 'linux') return null;
  try {
    const trim = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)');
    return (pad, done) => {
      trim.async(pad, done);
    };
  } catch {
    return null;
  }
}

function anonymousRss(): number | null {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/**
 * Starts trimming every `intervalMs` (0: never; then, and where glibc's malloc_trim is missing,
 * returns null). The timer does not keep the process alive. `onTrim` sees each trim's outcome.
 */
export function startMallocTrimmer(intervalMs: number, onTrim?: (outcome: TrimOutcome) => void): MallocTrimmer | null {
  if (intervalMs <= 0) return null;
  const call = loadMallocTrim();
  if (!call) return null;
  let running = false;
  const trimNow = async (): Promise<TrimOutcome | null> => {
    if (running) return null;
    running = true;
    try {
      const before = anonymousRss();
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => call(0, (err) => (err ? reject(err instanceof Error ? err : new Error('malloc_trim failed')) : resolve())));
      const seconds = (performance.now() - t0) / 1000;
      const after = anonymousRss();
      const outcome = { releasedBytes: before !== null && after !== null ? Math.max(0, before - after) : 0, seconds };
      onTrim?.(outcome);
      return outcome;
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void trimNow().catch(() => undefined), intervalMs);
  timer.unref();
  return { trimNow, stop: () => clearInterval(timer) };
}
