// A provider's create quota is a contract like its query quota (docs/providers.md "Create
// pacing", docs/decisions/0057): Replicate documents 600 creates a minute for the account, and a
// burst of our own admitted tasks must not be throttled into failures. Every submit claim of a
// provider is paced by one GCRA (generic cell rate algorithm) whose state, the theoretical arrival
// time (TAT) of the next create, is a column of the provider's control row, read and moved under
// that row's lock in the claim transaction (db/provider-control.ts): exact across worker processes.
//
// A claim that does not conform is not refused: it reserves the moment it will conform (the TAT
// moves on for it) and its workflow sleeps until then, so a backlog of N claims costs N claims
// plus N returns, not a herd re-asking every second. A reservation is honoured when its claim
// comes back, up to RESERVATION_GRACE_MS late (a workflow timer or a busy worker); later than that
// the moment has passed unused and the claim takes a new place.
//
// The bound: creates in any window of W seconds ≤ burst + rate × (W + grace + slack), where the
// slack (DUE_SLACK_MS, 10 ms) is how early a claim may go. At the default share (0.9 of the quota,
// a one-second burst, 5 s of grace) that is 0.9 × q × (W + 6.01), within q × W for every
// W ≥ 55 s: the documented per-minute quota holds over any minute, and a 10-second window sees at
// most 1.44 × q × 10 (the "short bursts" Replicate tolerates). Claims that come back on time (no
// grace used) are held to GCRA's own bound: burst + ⌊(W + slack) / interval⌋.

/** Late by up to this, a reservation is still honoured; later, the claim takes a new place. */
export const RESERVATION_GRACE_MS = 5_000;
/** The share of the account's create quota the pacer uses (the rest absorbs bursts and grace). */
export const CREATE_PACE_SHARE = 0.9;
/**
 * A reservation (or a conform time) this close ahead is treated as due: a timer that fires a few
 * ms early is not sent back. A claim may therefore go up to this early, and the bounds above carry it.
 */
export const DUE_SLACK_MS = 10;

export interface CreatePace {
  /** Creates per second the pacer admits on average. */
  readonly ratePerSecond: number;
  /** Creates that may go back to back after a lull. */
  readonly burst: number;
  readonly graceMs: number;
}

/** The pace for an account quota of `quotaPerSecond` creates a second. */
export function createPaceFor(quotaPerSecond: number): CreatePace {
  if (!(quotaPerSecond > 0)) throw new RangeError(`a create quota must be above 0, got ${quotaPerSecond}`);
  const ratePerSecond = quotaPerSecond * CREATE_PACE_SHARE;
  return { ratePerSecond, burst: Math.max(1, Math.floor(ratePerSecond)), graceMs: RESERVATION_GRACE_MS };
}

/** What a claim knows when it decides: the clock and TAT of the provider's row, and its own reservation. */
export interface PaceState {
  readonly nowMs: number;
  /** provider_control.create_tat; null before the first paced create. */
  readonly tatMs: number | null;
  /** task_attempt.paced_until of the claiming attempt; null: it holds none. */
  readonly reservedAtMs: number | null;
}

export type PaceDecision =
  /** Call now. `tatMs`: the TAT to store (null: unchanged, the claim used its reservation). */
  | { readonly kind: 'go'; readonly tatMs: number | null }
  /**
   * Not yet: sleep until `untilMs`. `reserveAtMs` and `tatMs` are to be stored (the claim's new
   * place and the TAT past it), or both null when the claim already holds that place.
   */
  | { readonly kind: 'wait'; readonly untilMs: number; readonly reserveAtMs: number | null; readonly tatMs: number | null };

/** The pacer's decision for one claim (pure; the caller stores what it says under the row lock). */
export function decidePace(pace: CreatePace, state: PaceState): PaceDecision {
  const { nowMs, reservedAtMs } = state;
  if (reservedAtMs !== null) {
    if (reservedAtMs - nowMs > DUE_SLACK_MS) return { kind: 'wait', untilMs: reservedAtMs, reserveAtMs: null, tatMs: null };
    if (nowMs - reservedAtMs <= pace.graceMs) return { kind: 'go', tatMs: null };
    // Lapsed: that moment went unused; a new place below.
  }
  const interval = 1_000 / pace.ratePerSecond;
  const tat = Math.max(state.tatMs ?? nowMs, nowMs);
  // GCRA: a create conforms while the TAT is at most (burst - 1) intervals ahead of it.
  const conformsAt = tat - (pace.burst - 1) * interval;
  const next = tat + interval;
  if (conformsAt <= nowMs + DUE_SLACK_MS) return { kind: 'go', tatMs: next };
  return { kind: 'wait', untilMs: conformsAt, reserveAtMs: conformsAt, tatMs: next };
}
