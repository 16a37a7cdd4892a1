// Wake signals after callbacks, coalesced per task. A callback's 2xx is followed by a
// best-effort wake signal so the workflow applies the inbox now rather than at its next poll.
// The signal only says "re-read the facts", so many callbacks of one task in quick succession
// (a provider's progress events, its retries, a storm of redeliveries) need one signal in flight
// per task, not one each: while a task's signal is in flight, further wakes only mark it, and
// one more signal follows when it returns. So every inbox row committed before a wake() is
// followed by a signal sent after that commit, and Temporal sees at most two signals per task
// at a time from this process (the callbacks benchmark sent ~50 callbacks per task).
//
// Signals in flight are also bounded across tasks (`maxInFlight`): past it, a task's wake waits
// in a queue (once per task, first come first served) for a signal to return, and wakes of a
// task already queued fold into its place. Temporal then takes signals at the rate it answers
// them, and a burst of callbacks across many tasks costs it fewer signals, not a deeper queue
// of its own; Temporal's share of the machine is what bound the API's callbacks/s (issue #19).
export interface TaskWaker {
  /** Wakes the task's workflow soon; returns at once (failures are the poll's to cover). */
  wake(taskId: string): void;
  /** Tasks with a signal in flight. */
  inFlight(): number;
  /** Signals sent and wakes folded into one already due, since start; tasks with a signal in flight and waiting for a place, now. */
  stats(): { sent: number; coalesced: number; inFlight: number; queued: number };
}

export interface TaskWakerOptions {
  /** Signals in flight at once across tasks (WAKE_SIGNALS_MAX_IN_FLIGHT). */
  readonly maxInFlight: number;
}

export function createTaskWaker(signal: (taskId: string) => Promise<unknown>, opts: TaskWakerOptions): TaskWaker {
  if (!(opts.maxInFlight >= 1)) throw new RangeError(`maxInFlight must be at least 1, not ${opts.maxInFlight}`);
  const flying = new Map<string, { again: boolean }>();
  // Tasks waiting for a place, in the order they asked (a Set keeps insertion order).
  const queued = new Set<string>();
  let sent = 0;
  let coalesced = 0;

  function nextQueued(): string | undefined {
    const first = queued.values().next();
    if (first.done) return undefined;
    queued.delete(first.value);
    return first.value;
  }

  async function drive(taskId: string): Promise<void> {
    const entry = { again: false };
    flying.set(taskId, entry);
    let next: string | undefined = taskId;
    try {
      do {
        entry.again = false;
        sent += 1;
        // A `signal` that throws at once must not end this drive without handing its place on.
        let sending: Promise<unknown>;
        try {
          sending = signal(taskId);
        } catch {
          sending = Promise.resolve();
        }
        await sending.catch(() => undefined);
        // A wake during the signal needs one more. It keeps this place unless others wait for
        // one: then it queues behind them, so one busy task cannot hold a place for ever.
        if (!entry.again) next = undefined;
        else if (queued.size > 0) {
          queued.add(taskId);
          next = undefined;
        }
      } while (next !== undefined);
    } finally {
      flying.delete(taskId);
    }
    const waiting = nextQueued();
    if (waiting !== undefined) void drive(waiting);
  }

  return {
    wake(taskId) {
      const entry = flying.get(taskId);
      if (entry) {
        if (entry.again) coalesced += 1;
        entry.again = true;
        return;
      }
      if (queued.has(taskId)) {
        coalesced += 1;
        return;
      }
      if (flying.size >= opts.maxInFlight) {
        queued.add(taskId);
        return;
      }
      void drive(taskId);
    },
    inFlight: () => flying.size,
    stats: () => ({ sent, coalesced, inFlight: flying.size, queued: queued.size }),
  };
}
