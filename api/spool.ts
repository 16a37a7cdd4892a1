// The callback fallback spool (docs/design.md §5 "Callbacks"): when the inbox
// cannot be written — Postgres unreachable, or a mode that makes facts read-only — a verified
// callback is appended to a local file and fsync'd before the provider gets its 2xx. A replayer
// later feeds every spooled callback through the normal inbox path; the inbox dedupes on
// (provider, dedupe_key), so replaying a line twice (a crash mid-replay) changes nothing.
//
// Files, one directory per database (see spoolDirFor). Each process has an instance id (random,
// never its pid: a container's pid 1 is every process's pid) and keeps a lease on it:
//   owner-<instance>.lease          touched every leaseMs/3 while the process lives
//   active-<instance>-<seq>.ndjson  appended by that process
//   ready-<…>.ndjson                sealed, waiting for replay (rotated from active, or adopted)
//   replaying-<instance>-<…>.ndjson claimed by a replayer (an atomic rename)
//   dead-<instance>.ndjson          lines that could not be applied, set aside (ops spool status / requeue)
// Files whose owner's lease is missing or older than leaseMs belong to a dead process: any replayer
// adopts them (back to ready; docs/decisions/0015). An owner that finds its active file taken from it (it stalled past
// its lease) writes the record again into a fresh file before acknowledging: at least once.
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../observability/logger';

import { errno, fsyncDir, isDead, readLines, readSpoolFiles, type SpooledCallback } from '../storage/spool-files';

export type { SpooledCallback };

export interface ReplayPass {
  readonly replayed: number;
  readonly corrupt: number;
  /** Lines that could not be applied and were set aside in a dead-letter file. */
  readonly deadLettered: number;
  readonly files: number;
  /** Set when a transient failure (e.g. the database went away again) stopped the pass; its file stays. */
  readonly error: string | null;
}

/** The spool holds its size limit (CALLBACK_SPOOL_MAX_BYTES): the callback is refused, not written. */
export class SpoolFullError extends Error {
  constructor(maxBytes: number) {
    super(`the callback spool is full (${maxBytes} bytes)`);
    this.name = 'SpoolFullError';
  }
}

export interface CallbackSpool {
  readonly dir: string;
  /** Appends and fsyncs one callback. Resolves only once it is on disk; SpoolFullError past the size limit. */
  append(rec: Omit<SpooledCallback, 'v' | 'spoolId'>): Promise<void>;
  /**
   * Spooled callbacks not yet replayed (lines in all files but dead letters). A line being
   * replayed still counts until its file is removed, so 0 means every line is in the inbox (or
   * set aside as a dead letter), even while a replayer renames files under the count.
   */
  pending(): Promise<number>;
  /**
   * Seals the active file and replays every sealed file through `ingest` (each in its order; the
   * inbox orders events by the provider's clock). A line
   * whose ingest fails with a transient error stops the pass (its file stays for the next one);
   * any other failure sets the line aside as a dead letter and the pass goes on.
   */
  replay(ingest: (rec: SpooledCallback) => Promise<void>): Promise<ReplayPass>;
  /** Stops the lease timer (tests, shutdown); the lease then runs out and the files are adopted. */
  close(): void;
}

export interface CallbackSpoolOptions {
  readonly dir: string;
  readonly logger: Logger;
  /** A process whose lease is older than this is dead: its files are adopted (config CALLBACK_SPOOL_LEASE_MS). */
  readonly leaseMs: number;
  /** The spool's size cap in bytes (config CALLBACK_SPOOL_MAX_BYTES): past it appends are refused. */
  readonly maxBytes: number;
  /** Whether an ingest failure is passing (retry the line later) rather than the line's own fault. */
  readonly isTransient: (err: unknown) => boolean;
  /** Told of every line set aside (the API counts them: vidorch_callbacks_received_total{outcome="spool_dead_lettered"}). */
  readonly onDeadLetter?: (provider: string) => void;
}

const INSTANCE = /^(?:active|replaying)-([0-9a-f]{16})-/;

/** A line the replay cannot use, as a dead letter: the line itself kept (bounded) for a person. */
const unreadableLine = (line: string): SpooledCallback => ({ provider: '?', unreadable: line.slice(0, 64 * 1024) }) as unknown as SpooledCallback;

export function createCallbackSpool(opts: CallbackSpoolOptions): CallbackSpool {
  const dir = path.resolve(opts.dir);
  const me = randomBytes(8).toString('hex');
  const leaseFile = path.join(dir, `owner-${me}.lease`);
  let active: { file: string; handle: fs.FileHandle } | null = null;
  let seq = 0;
  // Bytes in the directory as this process last counted them, plus its own appends since;
  // recounted after each replay pass (other API processes may share the directory).
  let spooledBytes: number | null = null;
  // Appends and rotation run one at a time, in order.
  let chain: Promise<unknown> = Promise.resolve();
  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const next = chain.then(work, work);
    chain = next.catch(() => undefined);
    return next;
  };

  async function renewLease(): Promise<void> {
    const now = new Date();
    try {
      await fs.utimes(leaseFile, now, now);
    } catch (err) {
      if (errno(err) !== 'ENOENT') throw err;
      await fs.mkdir(dir, { recursive: true });
      await fs.writeFile(leaseFile, `${process.pid}\n`);
    }
  }
  const leaseTimer = setInterval(
    () => {
      renewLease().catch((err: unknown) => opts.logger.warn({ err }, 'spool lease renewal failed'));
    },
    Math.max(50, Math.floor(opts.leaseMs / 3)),
  );
  leaseTimer.unref();

  async function openActive() {
    if (active) return active;
    await fs.mkdir(dir, { recursive: true });
    await renewLease();
    const file = path.join(dir, `active-${me}-${String(seq++).padStart(6, '0')}.ndjson`);
    const handle = await fs.open(file, 'a');
    // The new name must survive a crash too, not only the bytes.
    await fsyncDir(dir);
    active = { file, handle };
    return active;
  }

  async function seal(): Promise<void> {
    if (!active) return;
    const { file, handle } = active;
    active = null;
    await handle.close();
    await fs.rename(file, path.join(dir, path.basename(file).replace(/^active-/, 'ready-'))).catch((err: unknown) => {
      if (errno(err) !== 'ENOENT') throw err; // adopted by another process meanwhile: it is ready already
    });
  }

  /** Appends one line to the active file; false when the file was taken from us (we stalled past our lease). */
  async function appendLine(line: string): Promise<boolean> {
    const { file, handle } = await openActive();
    await handle.appendFile(line, 'utf8');
    await handle.datasync();
    const [onDisk, mine] = await Promise.all([fs.stat(file).catch(() => null), handle.stat()]);
    if (onDisk?.ino === mine.ino) return true;
    active = null;
    await handle.close().catch(() => undefined);
    return false;
  }

  async function listDir(): Promise<string[]> {
    try {
      return (await fs.readdir(dir)).sort();
    } catch (err) {
      if (errno(err) === 'ENOENT') return [];
      throw err;
    }
  }

  /** Instances whose lease is fresh (this one included). */
  async function liveOwners(files: string[]): Promise<Set<string>> {
    const live = new Set([me]);
    for (const f of files) {
      const m = /^owner-([0-9a-f]{16})\.lease$/.exec(f);
      if (!m) continue;
      const st = await fs.stat(path.join(dir, f)).catch(() => null);
      if (st && Date.now() - st.mtimeMs < opts.leaseMs) live.add(m[1]!);
      else await fs.unlink(path.join(dir, f)).catch(() => undefined);
    }
    return live;
  }

  /** Files of dead processes (active or half-replayed) become ready again; files in an older naming count as dead. */
  async function adoptOrphans(): Promise<void> {
    const files = await listDir();
    const live = await liveOwners(files);
    for (const f of files) {
      if (!/^(active|replaying)-.*\.ndjson$/.test(f)) continue;
      const owner = INSTANCE.exec(f)?.[1];
      if (owner && live.has(owner)) continue;
      const rest = f.replace(/^(active|replaying)-/, '').replace(/^ready-/, '');
      await fs.rename(path.join(dir, f), path.join(dir, `ready-${rest}`)).catch(() => undefined);
    }
  }

  /** Sets a line aside (fsync'd: it was acknowledged to the provider) with why it could not be applied. */
  async function deadLetter(rec: SpooledCallback, err: unknown): Promise<void> {
    const error = String((err as Error)?.message ?? err).slice(0, 500);
    const handle = await fs.open(path.join(dir, `dead-${me}.ndjson`), 'a');
    try {
      await handle.appendFile(`${JSON.stringify({ ...rec, deadLetter: { error, deadAt: new Date().toISOString() } })}\n`, 'utf8');
      await handle.datasync();
    } finally {
      await handle.close();
    }
    opts.onDeadLetter?.(rec.provider);
    opts.logger.warn({ provider: rec.provider, error }, 'spooled callback set aside as a dead letter');
  }

  async function replayFile(file: string, ingest: (rec: SpooledCallback) => Promise<void>) {
    let replayed = 0;
    let corrupt = 0;
    let deadLettered = 0;
    const lines = await readLines(file);
    for (const [i, line] of lines.entries()) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        // Only a file's last line can be torn (a crash mid-append; the append seals its file after
        // a failed write), and a torn line was never acknowledged to the provider, which retries.
        // Any other unreadable line was acknowledged: it is kept as a dead letter.
        if (i === lines.length - 1) {
          corrupt += 1;
          opts.logger.warn({ file: path.basename(file) }, 'skipping a torn last spool line');
        } else {
          await deadLetter(unreadableLine(line), new Error('an unreadable spool line before the last'));
          deadLettered += 1;
        }
        continue;
      }
      const rec = parsed as SpooledCallback;
      if (rec === null || typeof rec !== 'object' || rec.v !== 1 || typeof rec.provider !== 'string' || !rec.job) {
        // Readable but not a line this version writes (another version sharing the directory?):
        // acknowledged once, so kept for a person, never dropped.
        await deadLetter(unreadableLine(line), new Error('not a spooled callback of this version'));
        deadLettered += 1;
        continue;
      }
      try {
        await ingest(rec);
        replayed += 1;
      } catch (err) {
        if (opts.isTransient(err)) throw Object.assign(err as Error, { spoolPass: { replayed, corrupt, deadLettered } });
        await deadLetter(rec, err);
        deadLettered += 1;
      }
    }
    return { replayed, corrupt, deadLettered };
  }

  async function countBytes(): Promise<number> {
    let n = 0;
    for (const f of await listDir()) n += (await fs.stat(path.join(dir, f)).catch(() => ({ size: 0 }))).size;
    return n;
  }

  async function replayAll(ingest: (rec: SpooledCallback) => Promise<void>): Promise<ReplayPass> {
    await serial(seal);
    await adoptOrphans();
    let replayed = 0;
    let corrupt = 0;
    let deadLettered = 0;
    let files = 0;
    for (const f of await listDir()) {
      if (!f.startsWith('ready-')) continue;
      const claimed = path.join(dir, `replaying-${me}-${f.slice('ready-'.length)}`);
      try {
        await fs.rename(path.join(dir, f), claimed);
      } catch {
        continue; // another replayer claimed it first
      }
      try {
        const r = await replayFile(claimed, ingest);
        replayed += r.replayed;
        corrupt += r.corrupt;
        deadLettered += r.deadLettered;
        files += 1;
        await fs.unlink(claimed);
      } catch (err) {
        // Put it back for the next pass; lines already replayed dedupe in the inbox.
        await fs.rename(claimed, path.join(dir, f)).catch(() => undefined);
        const partial = (err as { spoolPass?: Omit<ReplayPass, 'files' | 'error'> }).spoolPass;
        return {
          replayed: replayed + (partial?.replayed ?? 0),
          corrupt: corrupt + (partial?.corrupt ?? 0),
          deadLettered: deadLettered + (partial?.deadLettered ?? 0),
          files,
          error: (err as Error).message,
        };
      }
    }
    return { replayed, corrupt, deadLettered, files, error: null };
  }

  return {
    dir,
    append(rec) {
      return serial(async () => {
        try {
          const line = `${JSON.stringify({ v: 1, spoolId: randomUUID(), ...rec })}\n`;
          const before = (spooledBytes ??= await countBytes());
          const bytes = Buffer.byteLength(line);
          if (before + bytes > opts.maxBytes) throw new SpoolFullError(opts.maxBytes);
          // Twice at most: a file taken from us between our write and our check may have been
          // read before the write; the record goes again into a fresh file (the inbox dedupes).
          if (!(await appendLine(line)) && !(await appendLine(line))) {
            // Taken from us twice running: nothing says the line is on disk where a replayer will
            // read it, so it is not acknowledged (the provider retries).
            throw new Error('the spool file was taken over twice while appending; not acknowledged');
          }
          spooledBytes = before + bytes;
        } catch (err) {
          // Refused before a byte was written: the file needs no sealing.
          if (err instanceof SpoolFullError) throw err;
          // A write that failed part way (ENOSPC, EIO) may have left half a line. Seal the file,
          // so the next acknowledged append starts a fresh one instead of gluing itself onto the
          // torn tail, where the replay would have to skip both.
          await seal().catch(() => undefined);
          throw err;
        }
      });
    },

    async pending() {
      let n = 0;
      for (const f of await readSpoolFiles(dir)) if (!isDead(f.name)) n += f.lines.length;
      return n;
    },

    async replay(ingest) {
      try {
        return await replayAll(ingest);
      } finally {
        spooledBytes = null;
      }
    },

    close() {
      clearInterval(leaseTimer);
    },
  };
}
/** Replays the spool every `intervalMs` while `canReplay()` says the inbox may be written. */
export function startSpoolReplayer(opts: {
  spool: CallbackSpool;
  intervalMs: number;
  canReplay: () => Promise<boolean>;
  ingest: (rec: SpooledCallback) => Promise<void>;
  logger: Logger;
}): { stop(): Promise<void>; runOnce(): Promise<ReplayPass | null> } {
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<unknown> = Promise.resolve();
  const runOnce = async (): Promise<ReplayPass | null> => {
    if (!(await opts.canReplay().catch(() => false))) return null;
    const pass = await opts.spool.replay(opts.ingest);
    if (pass.replayed || pass.corrupt || pass.deadLettered) opts.logger.info({ ...pass }, 'replayed spooled callbacks into the inbox');
    if (pass.error) opts.logger.warn({ error: pass.error }, 'spool replay stopped; will retry');
    return pass;
  };
  const tick = () => {
    const pass = runOnce().catch((err: unknown) => {
      opts.logger.warn({ err }, 'spool replay failed; will retry');
      return null;
    });
    running = pass;
    void pass.then(() => {
      if (!stopped) timer = setTimeout(tick, opts.intervalMs);
    });
  };
  tick();
  return {
    runOnce,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
