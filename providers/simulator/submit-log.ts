// Every submit request the simulator received, whatever it answered (accepted, or refused by a
// fault knob: 429 / 5xx before accepting): the provider-side count of calls that a client's
// retry amplification is measured with (`npm run bench -- resilience`). Per protocol, per
// correlation token (our attempt id: more than one submit per token would be a client calling
// twice for one attempt), and per wall-clock second for the last hour (calls per second after a
// heal). The job stores count only what was created; this counts what arrived.
import type { SimProvider, SubmitFault } from './faults';

/** Faults that answer without creating anything: the request was refused. */
const REFUSING: readonly SubmitFault[] = ['rate_limit', 'error_5xx_before_accept'];
const KEEP_SECONDS = 3_600;

export interface SubmitLogStats {
  /** Submit requests received (all protocols, all answers). */
  readonly submits_received: number;
  /** Of those, refused by a fault knob before anything was created (429, 5xx before accepting). */
  readonly submits_refused: number;
  readonly submits_received_by_provider: Record<SimProvider, number>;
  /** Submit requests per correlation token (received, including refused ones). */
  readonly submits_by_token: Record<string, number>;
  /** [unix second, submits received in it], oldest first, the last hour with traffic only. */
  readonly submits_per_second: [number, number][];
}

/** One submit request as it arrived (for in-process listeners such as the resilience benchmark). */
export interface SubmitReceived {
  readonly provider: SimProvider;
  readonly token: string | null;
  readonly fault: SubmitFault;
  /** True when a fault knob refused it before anything was created. */
  readonly refused: boolean;
  readonly atMs: number;
}

export class SubmitLog {
  private total = 0;
  private refused = 0;
  private byProvider: Record<SimProvider, number> = { replicate: 0, fal: 0, runway: 0, kling: 0 };
  private readonly byToken = new Map<string, number>();
  private readonly perSecond = new Map<number, number>();
  private readonly listeners = new Set<(s: SubmitReceived) => void>();

  constructor(private readonly nowMs: () => number = Date.now) {}

  /** Calls `listener` for every submit received from now on; returns the unsubscribe. */
  subscribe(listener: (s: SubmitReceived) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  record(provider: SimProvider, token: string | null | undefined, fault: SubmitFault): void {
    const refused = REFUSING.includes(fault);
    const atMs = this.nowMs();
    this.total++;
    if (refused) this.refused++;
    this.byProvider[provider]++;
    if (token) this.byToken.set(token, (this.byToken.get(token) ?? 0) + 1);
    const sec = Math.floor(atMs / 1000);
    this.perSecond.set(sec, (this.perSecond.get(sec) ?? 0) + 1);
    // Map iteration is insertion order, i.e. oldest second first.
    for (const s of this.perSecond.keys()) {
      if (s > sec - KEEP_SECONDS) break;
      this.perSecond.delete(s);
    }
    for (const l of this.listeners) l({ provider, token: token ?? null, fault, refused, atMs });
  }

  stats(): SubmitLogStats {
    return {
      submits_received: this.total,
      submits_refused: this.refused,
      submits_received_by_provider: { ...this.byProvider },
      submits_by_token: Object.fromEntries(this.byToken),
      submits_per_second: [...this.perSecond],
    };
  }

  clear(): void {
    this.total = 0;
    this.refused = 0;
    this.byProvider = { replicate: 0, fal: 0, runway: 0, kling: 0 };
    this.byToken.clear();
    this.perSecond.clear();
  }
}
