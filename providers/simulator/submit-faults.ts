// The submit fault knobs (faults.ts) applied the same way to every protocol; each protocol
// supplies its own error bodies and its own success answer.
import type { Request, Response } from 'express';
import type { FaultConfig, SubmitFault } from './faults';

export interface SubmitHandlers<T> {
  /** Create the job (it exists from here on, whatever the client hears). */
  readonly create: () => T;
  /** The protocol's success answer. */
  readonly answer: (job: T) => void;
  /** 5xx before anything was created. */
  readonly errorBeforeAccept: () => void;
  /** 5xx after the job was created. */
  readonly errorAfterAccept: () => void;
  /** 429 (Retry-After already set when configured). */
  readonly rateLimited: () => void;
}

/** Runs one submit under `fault`; timers of delayed answers are kept in `pending` (closed on shutdown). */
export function runSubmit<T>(req: Request, res: Response, fault: SubmitFault, config: FaultConfig, pending: Set<NodeJS.Timeout>, h: SubmitHandlers<T>): void {
  if (fault === 'error_5xx_before_accept') return h.errorBeforeAccept();
  if (fault === 'rate_limit') {
    if (config.retry_after_s !== undefined) res.set('Retry-After', String(config.retry_after_s));
    return h.rateLimited();
  }
  const job = h.create();
  switch (fault) {
    case 'accept_then_hang':
      return; // the socket stays open until the client gives up or the server closes
    case 'reset_after_accept':
      req.socket.destroy();
      return;
    case 'error_5xx_after_accept':
      return h.errorAfterAccept();
    case 'answer_after_ms': {
      const t = setTimeout(() => {
        pending.delete(t);
        if (!res.writableEnded && !res.destroyed) h.answer(job);
      }, config.submit_delay_ms ?? 1_000);
      pending.add(t);
      return;
    }
    default:
      h.answer(job);
  }
}

/** The last non-empty path segment of a URL (our correlation token in webhook URLs). */
export function tokenOfUrl(url: string | null | undefined): string | null {
  if (!url) return null;
  try {
    const seg = new URL(url).pathname
      .split('/')
      .filter((x) => x.length > 0)
      .pop();
    return seg ? decodeURIComponent(seg) : null;
  } catch {
    return null;
  }
}
