// Open-loop create load for outage drills: POST /v1/tasks at a fixed rate whatever the answers
// take (bounded in-flight), every answer counted by phase and status.
import type { DrillWorld } from './harness';

/** What every outage drill reports about the create load it ran through the outage. */
export interface OutageLoadOutcome {
  readonly outageSeconds: number;
  readonly load: LoadReport['byPhase'];
  readonly serverErrors: number;
  readonly accepted: number;
  /** Accepted (202) but not in the facts: must be 0. */
  readonly missing: number;
  /** Accepted and not terminal when the drill gave up waiting. */
  readonly unconverged: number;
  readonly byStatus: Record<string, number>;
}

export interface LoadReport {
  /** phase → status ('202', '503', '500', 'network-error', …) → count */
  readonly byPhase: Record<string, Record<string, number>>;
  /** Task ids answered 202, with when (and when the request was sent). */
  readonly accepted: { id: string; at: number; sentAt: number }[];
  readonly serverErrors: number;
}

export function startCreateLoad(
  world: DrillWorld,
  opts: { ratePerSecond: number; prefix: string; phase: () => string; maxInFlight?: number },
): { stop(): Promise<LoadReport>; acceptedSince(t: number): number; firstAcceptedSince(t: number): number | null } {
  const byPhase: Record<string, Record<string, number>> = {};
  const accepted: { id: string; at: number; sentAt: number }[] = [];
  let serverErrors = 0;
  let inFlight = 0;
  let seq = 0;
  const pending = new Set<Promise<void>>();
  const count = (phase: string, status: string) => {
    const p = (byPhase[phase] ??= {});
    p[status] = (p[status] ?? 0) + 1;
  };
  const one = async () => {
    const phase = opts.phase();
    const i = seq++;
    const sentAt = Date.now();
    try {
      const res = await fetch(`${world.apiUrl}/v1/tasks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${world.apiKey}`, 'idempotency-key': `${opts.prefix}-${i}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'minimax/video-01', prompt: `${opts.prefix} ${i}`, duration_seconds: 6, resolution: '720p' }),
        signal: AbortSignal.timeout(15_000),
      });
      const body = (await res.json().catch(() => null)) as { task_id?: string } | null;
      count(phase, String(res.status));
      if (res.status >= 500 && res.status !== 503) serverErrors += 1;
      if (res.status === 202 && body?.task_id) accepted.push({ id: body.task_id, at: Date.now(), sentAt });
    } catch {
      count(phase, 'network-error');
    }
  };
  const timer = setInterval(() => {
    if (inFlight >= (opts.maxInFlight ?? 50)) {
      count(opts.phase(), 'skipped (in-flight limit)');
      return;
    }
    inFlight += 1;
    const p = one().finally(() => {
      inFlight -= 1;
      pending.delete(p);
    });
    pending.add(p);
  }, 1000 / opts.ratePerSecond);
  return {
    acceptedSince: (t) => accepted.filter((a) => a.at >= t).length,
    /** When the first create sent at or after `t` was answered 202 (null: none yet). */
    firstAcceptedSince: (t) => accepted.reduce<number | null>((first, a) => (a.sentAt >= t && (first === null || a.at < first) ? a.at : first), null),
    async stop() {
      clearInterval(timer);
      await Promise.allSettled([...pending]);
      return { byPhase, accepted, serverErrors };
    },
  };
}
