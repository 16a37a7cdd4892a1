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
// comes back, up to RESERVATION_GRACE_MS late (a workflow timer or a busy worker).
//
// Later than that its moment went unused. The claim then goes at once if the creates actually
// sent have left room: a second GCRA, over the sends alone (the same interval, a burst of
// LATE_SEND_BURST; the row's create_sent_tat), conforms. Otherwise (creates are going out at the
// pace) it takes a new place at the end. So moments wasted by late returns are used by the late
// claims themselves: a worker too busy to come back within the grace still sends at the pace,
// where a new place for every lapse would leave the pace's moments unused while the lapsed claims
// queued at its end (docs/decisions/0061-lapsed-reservations-use-unsent-moments.md).
//
// The bound: creates in any window of W seconds ≤ lateBurst + burst + rate × (W + grace + 2 × slack),
// where the slack (DUE_SLACK_MS, 10 ms) is how early a claim may go. (The sends up to the window's
// last late one are held by the sends' GCRA to lateBurst + rate × (span + slack); the rest went at
// their reservations, held by the pace's own bound, burst + rate × (span + grace + slack).) At the
// default share (0.9 of the quota, a one-second burst, 5 s of grace) that is
// 2 + 0.9 × q × (W + 6.02): at most 596 creates in any minute at Replicate's 10/s (600 a minute),
// and within q × W for every window of a minute or more at q ≥ 3.5/s (below, the bound may pass a
// minute's quota by one create). Claims that come back on
// time (no grace used, none late) are held to GCRA's own bound: burst + ⌊(W + slack) / interval⌋.

/** Late by up to this, a reservation is still honoured; later, it goes on a moment left unsent or takes a new place. */
export const RESERVATION_GRACE_MS = 5_000;
/**
 * The burst of the sends' own pace, which lapsed claims must conform to (at most the pace's burst):
 * two, so a late claim goes unless creates are going out at the pace right now. With one, any create
 * in the last interval sent it back, and at half the pace that was every other late claim.
 */
export const LATE_SEND_BURST = 2;
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
  /** The sends' own pace's burst, for claims back past the grace (LATE_SEND_BURST, at most burst). */
  readonly lateBurst: number;
}

/** The pace for an account quota of `quotaPerSecond` creates a second. */
export function createPaceFor(quotaPerSecond: number): CreatePace {
  if (!(quotaPerSecond > 0)) throw new RangeError(`a create quota must be above 0, got ${quotaPerSecond}`);
  const ratePerSecond = quotaPerSecond * CREATE_PACE_SHARE;
  const burst = Math.max(1, Math.floor(ratePerSecond));
  return { ratePerSecond, burst, graceMs: RESERVATION_GRACE_MS, lateBurst: Math.min(LATE_SEND_BURST, burst) };
}

/** What a claim knows when it decides: the clock and TAT of the provider's row, and its own reservation. */
export interface PaceState {
  readonly nowMs: number;
  /** provider_control.create_tat; null before the first paced create. */
  readonly tatMs: number | null;
  /** task_attempt.paced_until of the claiming attempt; null: it holds none. */
  readonly reservedAtMs: number | null;
  /** provider_control.create_sent_tat: the sends' own GCRA (burst lateBurst); null before the first send. */
  readonly sentTatMs: number | null;
}

export type PaceDecision =
  /**
   * Call now. `tatMs`: the TAT to store (null: unchanged, the claim used its reservation or a moment
   * its lapsed one left unsent); `sentTatMs`: the sends' TAT to store.
   */
  | { readonly kind: 'go'; readonly tatMs: number | null; readonly sentTatMs: number }
  /**
   * Not yet: sleep until `untilMs`. `reserveAtMs` and `tatMs` are to be stored (the claim's new
   * place and the TAT past it), or both null when the claim already holds that place.
   */
  | { readonly kind: 'wait'; readonly untilMs: number; readonly reserveAtMs: number | null; readonly tatMs: number | null };

/** The pacer's decision for one claim (pure; the caller stores what it says under the row lock). */
export function decidePace(pace: CreatePace, state: PaceState): PaceDecision {
  const { nowMs, reservedAtMs } = state;
  const interval = 1_000 / pace.ratePerSecond;
  // Every create sent moves the sends' TAT one interval past the later of it and now.
  const sent = Math.max(state.sentTatMs ?? nowMs, nowMs);
  const go = (tatMs: number | null): PaceDecision => ({ kind: 'go', tatMs, sentTatMs: sent + interval });
  if (reservedAtMs !== null) {
    if (reservedAtMs - nowMs > DUE_SLACK_MS) return { kind: 'wait', untilMs: reservedAtMs, reserveAtMs: null, tatMs: null };
    if (nowMs - reservedAtMs <= pace.graceMs) return go(null);
    // Lapsed: its moment went unused. If the sends' own pace conforms, creates are not going out
    // at the pace: it goes now on a moment left unsent, its place already paid for in the TAT.
    // Otherwise a new place below.
    if (sent - (pace.lateBurst - 1) * interval <= nowMs + DUE_SLACK_MS) return go(null);
  }
  const tat = Math.max(state.tatMs ?? nowMs, nowMs);
  // GCRA: a create conforms while the TAT is at most (burst - 1) intervals ahead of it.
  const conformsAt = tat - (pace.burst - 1) * interval;
  const next = tat + interval;
  if (conformsAt <= nowMs + DUE_SLACK_MS) return go(next);
  return { kind: 'wait', untilMs: conformsAt, reserveAtMs: conformsAt, tatMs: next };
}
