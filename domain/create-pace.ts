// A provider's create quota is a contract like its query quota (docs/providers.md "Create pacing",
// docs/decisions/0069): Replicate documents 600 creates a minute for the account, and a burst of
// our own admitted tasks must not be throttled. Every claim that would call a paced provider asks
// one GCRA (generic cell rate algorithm) whose state, the theoretical arrival time (TAT) of the
// provider's next create, is a column of the provider's control row, read and moved under that
// row's lock in the claim transaction: one pace across every worker process.
//
// The TAT moves only when a create goes. A claim that does not conform takes nothing: it is told
// how long to wait, from the moment the pace conforms again and the claims of the provider that
// came before it, and asks again then. A claim that comes back late, or never, leaves nothing
// unused behind it: whoever asks next takes the moment.
//
// The bound, for any sequence of claims: creates in any window of W seconds ≤ burst + rate × W
// (plus DUE_SLACK_MS of rate). At the default share (0.9 of the quota, a burst of two seconds of
// it) that is 0.9 q (W + 2): 558 in any minute at Replicate's 10 a second (600 a minute), and
// within the simulator's bucket of ten seconds of the quota.

/** The share of the account's create quota the pace uses (the rest absorbs the burst). */
export const CREATE_PACE_SHARE = 0.9;
/**
 * The burst, in seconds of the pace: claims that come back late (a busy worker) leave their moments
 * as credit, and the claims after them use it, so lateness up to this long costs no throughput.
 */
export const CREATE_BURST_SECONDS = 2;
/**
 * A conform time this close ahead is treated as now: a workflow timer that fires a few ms early is
 * not sent back for them. A create may therefore go up to this early; the bound above carries it.
 */
export const DUE_SLACK_MS = 10;

export interface CreatePace {
  /** Creates per second the pace admits on average. */
  readonly ratePerSecond: number;
  /** Creates that may go back to back after a lull. */
  readonly burst: number;
}

/** The pace for an account quota of `quotaPerSecond` creates a second. */
export function createPaceFor(quotaPerSecond: number): CreatePace {
  if (!(quotaPerSecond > 0)) throw new RangeError(`a create quota must be above 0, got ${quotaPerSecond}`);
  const ratePerSecond = quotaPerSecond * CREATE_PACE_SHARE;
  return { ratePerSecond, burst: Math.max(1, Math.floor(ratePerSecond * CREATE_BURST_SECONDS)) };
}

/** What a claim knows when it decides: the database's clock and the TAT of the provider's row. */
export interface PaceState {
  readonly nowMs: number;
  /** provider_control.create_tat; null before the first paced create. */
  readonly tatMs: number | null;
}

export type PaceDecision =
  /** Call now, and store `tatMs` as the provider's TAT (in the claim's transaction). */
  | { readonly kind: 'go'; readonly tatMs: number }
  /** Not now: the pace conforms again in `conformsInMs`. Nothing is stored. */
  | { readonly kind: 'wait'; readonly conformsInMs: number };

const intervalOf = (pace: CreatePace) => 1_000 / pace.ratePerSecond;

/** The pace's decision for one claim (pure; the caller stores the TAT under the row lock). */
export function decidePace(pace: CreatePace, state: PaceState): PaceDecision {
  const interval = intervalOf(pace);
  const tat = Math.max(state.tatMs ?? state.nowMs, state.nowMs);
  // A create conforms while the TAT is at most (burst - 1) intervals ahead of now.
  const conformsInMs = tat - (pace.burst - 1) * interval - state.nowMs;
  if (conformsInMs <= DUE_SLACK_MS) return { kind: 'go', tatMs: tat + interval };
  return { kind: 'wait', conformsInMs };
}

/**
 * How long a claim that must wait sleeps: until the pace conforms, plus an interval for each claim
 * of the provider that came before it and waits too. So a backlog of N claims asks again spread
 * over the N intervals it needs, in the order it came, instead of all at the next moment.
 */
export function paceWaitMs(pace: CreatePace, conformsInMs: number, waitingBefore: number): number {
  return Math.ceil(Math.max(0, conformsInMs) + waitingBefore * intervalOf(pace));
}
