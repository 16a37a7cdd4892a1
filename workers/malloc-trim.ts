// Hands the C allocator's free pages back to the system now and then (WORKER_MALLOC_TRIM_INTERVAL_MS).
//
// glibc's malloc returns memory to the system only from the top of each heap. A burst of work
// (thousands of tasks taken in, the Temporal core replaying evicted runs) leaves free chunks in
// the middle of its heaps, and those pages stay resident for the life of the process:
// the worker keeps its burst-time size while its tasks wait. malloc_trim(0) gives back every whole
// free page of every arena. Node has no binding for it, so it is called through koffi (a
// prebuilt FFI library) on libuv's thread pool.
//
// What a trim costs: it holds each arena's lock while it walks that arena, so any thread that
// allocates meanwhile (the event loop included) waits for it: up to ~0.5 s measured right after
// a burst. So a tick trims only when anonymous memory has grown by TRIM_MIN_GROWTH_BYTES since the
// last trim; a worker at rest is not stalled for nothing.
// Why a periodic trim and not another allocator: docs/decisions/0058-worker-malloc-trim.md.
import fs from 'node:fs';
import { createRequire } from 'node:module';

export interface TrimOutcome {
  /** Anonymous resident memory given back, as /proc/self/status saw it before and after (≥ 0; other threads allocate meanwhile). */
  readonly releasedBytes: number;
  /** From the call to its answer, the wait for a thread-pool thread included. */
  readonly seconds: number;
}

export interface MallocTrimmer {
  /** Trims once now, whatever the growth; null when a trim is already running. */
  trimNow(): Promise<TrimOutcome | null>;
  stop(): void;
}

/** A tick trims only once anonymous memory has grown this much since the last trim. */
export const TRIM_MIN_GROWTH_BYTES = 16 * 2 ** 20;

interface Koffi {
  load(path: string): { func(signature: string): { async(pad: number, done: (err: unknown) => void): void } };
}

/**
 * glibc's malloc_trim(0) on libuv's thread pool, or null where there is none: not Linux, a libc
 * without it (musl), or no koffi binary for this platform. koffi is required here, not imported,
 * so a platform it has no prebuilt binary for runs without the trim instead of failing at start-up.
 */
function loadMallocTrim(): (() => Promise<void>) | null {
  if (process.platform !== 'linux') return null;
  try {
    const koffi = createRequire(import.meta.url)('koffi') as Koffi;
    const trim = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)');
    return () =>
      new Promise((resolve, reject) => trim.async(0, (err) => (err ? reject(err instanceof Error ? err : new Error('malloc_trim failed')) : resolve())));
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

export interface TrimHooks {
  /** Each trim's outcome. */
  readonly onTrim?: (outcome: TrimOutcome) => void;
  /** A trim that failed (the timer carries on). */
  readonly onError?: (err: unknown) => void;
}

/**
 * Starts a timer that, every `intervalMs`, trims when anonymous memory has grown by
 * TRIM_MIN_GROWTH_BYTES since the last trim (0: never; then, and where glibc's malloc_trim is
 * missing, returns null). The timer does not keep the process alive.
 */
export function startMallocTrimmer(intervalMs: number, hooks: TrimHooks = {}): MallocTrimmer | null {
  if (intervalMs <= 0) return null;
  const trim = loadMallocTrim();
  if (!trim) return null;
  let running = false;
  /** Anonymous memory right after the last trim; null before the first. */
  let floor: number | null = null;
  const trimNow = async (): Promise<TrimOutcome | null> => {
    if (running) return null;
    running = true;
    try {
      const before = anonymousRss();
      const t0 = performance.now();
      await trim();
      const seconds = (performance.now() - t0) / 1000;
      const after = anonymousRss();
      floor = after;
      const outcome = { releasedBytes: before !== null && after !== null ? Math.max(0, before - after) : 0, seconds };
      hooks.onTrim?.(outcome);
      return outcome;
    } finally {
      running = false;
    }
  };
  const tick = async () => {
    const now = anonymousRss();
    if (floor !== null && now !== null) {
      // Growth counts from the lowest point since the last trim (V8 gives pages back too).
      floor = Math.min(floor, now);
      if (now - floor < TRIM_MIN_GROWTH_BYTES) return;
    }
    await trimNow();
  };
  const timer = setInterval(() => {
    tick().catch((err: unknown) => hooks.onError?.(err));
  }, intervalMs);
  timer.unref();
  return { trimNow, stop: () => clearInterval(timer) };
}
