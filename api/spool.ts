// The callback fallback spool (DESIGN.md §5 "Callbacks", seed 000 "灾备 Inbox"): when the inbox
// cannot be written — Postgres unreachable, or a mode that makes facts read-only — a verified
// callback is appended to a local file and fsync'd before the provider gets its 2xx. A replayer
// later feeds every spooled callback through the normal inbox path; the inbox dedupes on
// (provider, dedupe_key), so replaying a line twice (a crash mid-replay) changes nothing.
//
// Files, one directory per database (see spoolDirFor):
//   active-<pid>-<rand>.ndjson   appended by one live process
//   ready-<…>.ndjson             sealed, waiting for replay (rotated from active, or left by a dead process)
//   replaying-<pid>-<…>.ndjson   claimed by a replayer (an atomic rename; a dead claimer's go back to ready)
import { randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { StoredJob } from '../db/inbox';
import type { Logger } from '../observability/logger';

export interface SpooledCallback {
  readonly v: 1;
  readonly spoolId: string;
  readonly provider: string;
  /** The correlation token from the callback URL (our attempt id). */
  readonly token: string;
  readonly receivedAt: string;
  readonly receivedRegion: string;
  readonly job: StoredJob;
  readonly providerEventId: string | null;
  /** Unsigned callbacks (Kling): the job is re-read from the provider at replay. */
  readonly needsRefetch: boolean;
  readonly payload: unknown;
  readonly why: 'database-unavailable' | 'mode';
}

export interface ReplayPass {
  readonly replayed: number;
  readonly corrupt: number;
  readonly files: number;
  /** Set when a line could not be replayed (e.g. the database went away again); its file stays. */
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
  /** Spooled callbacks not yet replayed (lines in all files). */
  pending(): Promise<number>;
  /** Seals the active file and replays every sealed file, oldest first, through `ingest`. */
  replay(ingest: (rec: SpooledCallback) => Promise<void>): Promise<ReplayPass>;
}

/** The spool directory of one database: spooled callbacks are only ever replayed into the database they were meant for. */
export function spoolDirFor(baseDir: string, databaseUrl: string): string {
  const name = decodeURIComponent(new URL(databaseUrl).pathname.replace(/^\//, '')) || 'default';
  return path.resolve(baseDir, name.replace(/[^A-Za-z0-9_.-]/g, '_'));
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export function createCallbackSpool(opts: { dir: string; logger: Logger; maxBytes: number }): CallbackSpool {
  const dir = path.resolve(opts.dir);
  const me = `${process.pid}-${randomBytes(3).toString('hex')}`;
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

  async function openActive() {
    if (active) return active;
    await fs.mkdir(dir, { recursive: true });
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
    await fs.rename(file, path.join(dir, path.basename(file).replace(/^active-/, 'ready-')));
  }

  async function listDir(): Promise<string[]> {
    try {
      return (await fs.readdir(dir)).filter((f) => f.endsWith('.ndjson')).sort();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  /** Files of dead processes (active or half-replayed) become ready again. */
  async function adoptOrphans(): Promise<void> {
    for (const f of await listDir()) {
      const m = /^(active|replaying)-(\d+)-/.exec(f);
      if (!m || Number(m[2]) === process.pid || isAlive(Number(m[2]))) continue;
      const rest = m[1] === 'active' ? f.slice('active-'.length) : f.slice(`replaying-${m[2]}-`.length);
      await fs.rename(path.join(dir, f), path.join(dir, `ready-${rest.replace(/^ready-/, '')}`)).catch(() => undefined);
    }
  }

  async function countBytes(): Promise<number> {
    let n = 0;
    for (const f of await listDir()) n += (await fs.stat(path.join(dir, f)).catch(() => ({ size: 0 }))).size;
    return n;
  }

  async function replayFile(file: string, ingest: (rec: SpooledCallback) => Promise<void>) {
    const text = await fs.readFile(file, 'utf8');
    let replayed = 0;
    let corrupt = 0;
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      let rec: SpooledCallback;
      try {
        rec = JSON.parse(line) as SpooledCallback;
        if (rec.v !== 1 || typeof rec.provider !== 'string' || !rec.job) throw new Error('not a spooled callback');
      } catch {
        // A torn last line from a crash mid-append (never acknowledged to the provider, which retries).
        corrupt += 1;
        opts.logger.warn({ file: path.basename(file) }, 'skipping an unreadable spool line');
        continue;
      }
      await ingest(rec);
      replayed += 1;
    }
    return { replayed, corrupt };
  }

  async function replayReady(ingest: (rec: SpooledCallback) => Promise<void>): Promise<ReplayPass> {
    let replayed = 0;
    let corrupt = 0;
    let files = 0;
    for (const f of await listDir()) {
      if (!f.startsWith('ready-')) continue;
      const claimed = path.join(dir, `replaying-${process.pid}-${f.slice('ready-'.length)}`);
      try {
        await fs.rename(path.join(dir, f), claimed);
      } catch {
        continue; // another replayer claimed it first
      }
      try {
        const r = await replayFile(claimed, ingest);
        replayed += r.replayed;
        corrupt += r.corrupt;
        files += 1;
        await fs.unlink(claimed);
      } catch (err) {
        // Put it back for the next pass; lines already replayed dedupe in the inbox.
        await fs.rename(claimed, path.join(dir, f)).catch(() => undefined);
        return { replayed, corrupt, files, error: (err as Error).message };
      }
    }
    return { replayed, corrupt, files, error: null };
  }

  return {
    dir,
    append(rec) {
      return serial(async () => {
        const before = (spooledBytes ??= await countBytes());
        const { handle } = await openActive();
        try {
          const line = `${JSON.stringify({ v: 1, spoolId: randomUUID(), ...rec })}\n`;
          const bytes = Buffer.byteLength(line);
          if (before + bytes > opts.maxBytes) throw new SpoolFullError(opts.maxBytes);
          await handle.appendFile(line, 'utf8');
          await handle.datasync();
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
      for (const f of await listDir()) {
        const text = await fs.readFile(path.join(dir, f), 'utf8').catch(() => '');
        n += text.split('\n').filter((l) => l.trim()).length;
      }
      return n;
    },

    async replay(ingest) {
      await serial(seal);
      await adoptOrphans();
      try {
        return await replayReady(ingest);
      } finally {
        spooledBytes = null;
      }
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
    if (pass.replayed || pass.corrupt) opts.logger.info({ ...pass }, 'replayed spooled callbacks into the inbox');
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
