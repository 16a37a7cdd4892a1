// Follows a growing log file (a child process's output written by harness/processes.ts's
// fileLogger) and hands every complete line to `onLine` with the wall-clock time it was read.
// Lines printed without a timestamp of their own (console.warn JSON) get one this way, to within
// the poll interval. Bounded: reads at most `maxChunk` bytes per poll.
import fs from 'node:fs';

export interface LogTail {
  /** Reads what is left and stops polling. */
  stop(): Promise<void>;
}

export function tailFile(
  file: string,
  onLine: (line: string, atMs: number) => void,
  opts: { intervalMs?: number; maxChunk?: number } = {},
): LogTail {
  const intervalMs = opts.intervalMs ?? 200;
  const maxChunk = opts.maxChunk ?? 4 * 1024 * 1024;
  let offset = 0;
  let partial = '';
  let stopped = false;
  let reading: Promise<void> = Promise.resolve();

  const readMore = async (): Promise<void> => {
    let fh: fs.promises.FileHandle;
    try {
      fh = await fs.promises.open(file, 'r');
    } catch {
      return; // not created yet
    }
    try {
      for (;;) {
        const { size } = await fh.stat();
        if (size <= offset) return;
        const len = Math.min(maxChunk, size - offset);
        const buf = Buffer.alloc(len);
        const { bytesRead } = await fh.read(buf, 0, len, offset);
        if (bytesRead <= 0) return;
        offset += bytesRead;
        const at = Date.now();
        const text = partial + buf.subarray(0, bytesRead).toString('utf8');
        const lines = text.split('\n');
        partial = lines.pop() ?? '';
        for (const l of lines) if (l.length > 0) onLine(l, at);
        if (bytesRead < maxChunk) return;
      }
    } finally {
      await fh.close();
    }
  };

  const timer = setInterval(() => {
    if (stopped) return;
    reading = reading.then(readMore).catch(() => undefined);
  }, intervalMs);

  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await reading;
      await readMore().catch(() => undefined);
      if (partial.length > 0) onLine(partial, Date.now());
      partial = '';
    },
  };
}
