// What is on disk in the API's callback spool directory (api/spool.ts writes and replays it): where the
// directory of a database is, the files' lines read as one consistent listing, and what an operator
// sees of them (`ops spool status`, `ops spool requeue`, the callbacks reconciler). Reads and renames only.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { StoredJob } from '../db/inbox';

/** One line of a spool file: a verified callback the inbox could not take when it came. */
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

export interface DeadLetter {
  readonly provider: string;
  readonly token: string;
  readonly receivedAt: string;
  readonly error: string;
  readonly deadAt: string;
}

export interface SpoolStatus {
  readonly dir: string;
  /** Lines waiting for replay, and the files holding them. */
  readonly pending: number;
  readonly files: number;
  readonly deadLetters: number;
  /** The newest dead letters, newest first (at most 20). */
  readonly recentDeadLetters: DeadLetter[];
}

/** The spool directory of one database: spooled callbacks are only ever replayed into the database they were meant for. */
export function spoolDirFor(baseDir: string, databaseUrl: string): string {
  const name = decodeURIComponent(new URL(databaseUrl).pathname.replace(/^\//, '')) || 'default';
  return path.resolve(baseDir, name.replace(/[^A-Za-z0-9_.-]/g, '_'));
}

export const isDead = (f: string) => f.startsWith('dead-') && f.endsWith('.ndjson');
export const errno = (err: unknown) => (err as NodeJS.ErrnoException).code;

export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function readLines(file: string): Promise<string[]> {
  return (await readLinesIfPresent(file)) ?? [];
}

/** The file's lines, or null when it is gone (renamed or removed since it was listed). */
export async function readLinesIfPresent(file: string): Promise<string[] | null> {
  const text = await fs.readFile(file, 'utf8').catch((err: unknown) => (errno(err) === 'ENOENT' ? null : Promise.reject(err)));
  return text === null ? null : text.split('\n').filter((l) => l.trim());
}

/**
 * Every `.ndjson` file of the directory with its lines, as one consistent listing. A replayer
 * renames files while we read (active → ready on a seal, ready → replaying on a claim), and a
 * file renamed between the listing and its read would otherwise count as empty: a spool with a
 * callback in flight would report nothing pending. A rename keeps the lines, so when a listed
 * file has vanished the directory is listed again; a file removed for good (replayed) is gone
 * from the next listing too.
 */
export async function readSpoolFiles(dir: string): Promise<Array<{ name: string; lines: string[] }>> {
  for (let pass = 1; ; pass += 1) {
    const names = (await fs.readdir(dir).catch((err: unknown) => (errno(err) === 'ENOENT' ? [] : Promise.reject(err))))
      .filter((n) => n.endsWith('.ndjson'))
      .sort();
    const files: Array<{ name: string; lines: string[] }> = [];
    let vanished = false;
    for (const name of names) {
      const lines = await readLinesIfPresent(path.join(dir, name));
      if (lines === null) vanished = true;
      else files.push({ name, lines });
    }
    if (!vanished) return files;
    // Ten listings in a row each losing a file to a rename is a directory under constant churn:
    // a file that vanished is counted as one line rather than none, so "nothing pending" is
    // never said while something may be.
    if (pass >= 10) return [...files, ...names.filter((n) => !files.some((f) => f.name === n)).map((name) => ({ name, lines: ['(moved while counted)'] }))];
  }
}

/** What an operator sees of a spool directory (`ops spool status`); reads files only. */
export async function spoolStatus(dir: string): Promise<SpoolStatus> {
  let pending = 0;
  let queued = 0;
  const dead: DeadLetter[] = [];
  for (const { name, lines } of await readSpoolFiles(dir)) {
    if (!isDead(name)) {
      pending += lines.length;
      if (lines.length) queued += 1;
      continue;
    }
    for (const line of lines) {
      try {
        const d = JSON.parse(line) as Partial<SpooledCallback> & { deadLetter: { error: string; deadAt: string } };
        dead.push({
          provider: d.provider ?? '?',
          token: d.token ?? '?',
          receivedAt: d.receivedAt ?? '?',
          error: d.deadLetter.error,
          deadAt: d.deadLetter.deadAt,
        });
      } catch {
        dead.push({ provider: '?', token: '?', receivedAt: '?', error: 'unreadable dead letter', deadAt: '?' });
      }
    }
  }
  dead.sort((a, b) => b.deadAt.localeCompare(a.deadAt));
  return { dir, pending, files: queued, deadLetters: dead.length, recentDeadLetters: dead.slice(0, 20) };
}

/** Puts every dead letter back in the replay queue (`ops spool requeue`, after the cause is fixed); returns how many. */
export async function requeueDeadLetters(dir: string): Promise<number> {
  let n = 0;
  for (const f of (await fs.readdir(dir).catch(() => [] as string[])).filter(isDead)) {
    const claimed = path.join(dir, `ready-requeued-${Date.now()}-${f.slice('dead-'.length)}`);
    await fs.rename(path.join(dir, f), claimed);
    n += (await readLines(claimed)).length;
  }
  return n;
}
