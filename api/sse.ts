// A Server-Sent Events response (the WHATWG "server-sent events" format): `event`, `id`,
// `retry` and one `data` line of JSON per event, comment lines as heartbeats.
import type { Request, Response } from 'express';

export interface SseEvent {
  readonly event: string;
  readonly data: unknown;
  /** The resume id a client sends back as Last-Event-ID; absent leaves the client's last one. */
  readonly id?: string;
  /** How long the client should wait before reconnecting, in ms. */
  readonly retry?: number;
}

export interface SseWriter {
  send(e: SseEvent): void;
  comment(text: string): void;
  /** Ends the response; idempotent. */
  end(): void;
  /** True once the response ended or the client went away. */
  readonly closed: boolean;
  /** Called once when the response ends or the client goes away. */
  onClose(fn: () => void): void;
}

/**
 * Bytes a stream may hold unsent (the client does not read) before it is cut. Every transition
 * is replayed from Postgres after the client's Last-Event-ID when it reconnects, so cutting a
 * stalled stream loses nothing, while buffering for it would grow without bound.
 */
export const SSE_MAX_BUFFERED_BYTES = 1024 * 1024;

/** Starts the stream; `retryMs` (SSE `retry`) tells the client how long to wait before it reconnects. */
export function openSse(req: Request, res: Response, retryMs?: number, maxBufferedBytes = SSE_MAX_BUFFERED_BYTES): SseWriter {
  res.status(200);
  res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
  // No proxy or client may cache or transform it, and nginx-style proxies must not buffer it.
  res.setHeader('Cache-Control', 'no-cache, no-transform');
  res.setHeader('Connection', 'keep-alive');
  res.setHeader('X-Accel-Buffering', 'no');
  res.flushHeaders();
  if (retryMs !== undefined) res.write(`retry: ${retryMs}\n\n`);
  // Small events must leave at once.
  req.socket.setNoDelay(true);
  let closed = false;
  const closers: (() => void)[] = [];
  const finish = () => {
    if (closed) return;
    closed = true;
    for (const fn of closers.splice(0)) fn();
  };
  res.on('close', finish);
  const write = (text: string) => {
    if (closed) return;
    res.write(text);
    // A client that stopped reading: cut it (it resumes with Last-Event-ID, missing nothing).
    if (res.writableLength > maxBufferedBytes) {
      res.destroy();
      finish();
    }
  };
  return {
    send(e) {
      let out = `event: ${e.event}\n`;
      if (e.id !== undefined) out += `id: ${e.id}\n`;
      if (e.retry !== undefined) out += `retry: ${e.retry}\n`;
      // JSON.stringify escapes newlines: the data is always one line.
      out += `data: ${JSON.stringify(e.data)}\n\n`;
      write(out);
    },
    comment(text) {
      write(`: ${text.replace(/[\r\n]+/g, ' ')}\n\n`);
    },
    end() {
      if (!closed) res.end();
      finish();
    },
    get closed() {
      return closed;
    },
    onClose(fn) {
      if (closed) fn();
      else closers.push(fn);
    },
  };
}
