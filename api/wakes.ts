// Wake signals after callbacks, coalesced per task. A callback's 2xx is followed by a
// best-effort wake signal so the workflow applies the inbox now rather than at its next poll.
// The signal only says "re-read the facts", so many callbacks of one task in quick succession
// (a provider's progress events, its retries, a storm of redeliveries) need one signal in flight
// per task, not one each: while a task's signal is in flight, further wakes only mark it, and
// one more signal follows when it returns. So every inbox row committed before a wake() is
// followed by a signal sent after that commit, and Temporal sees at most two signals per task
// at a time from this process (the callbacks benchmark sent ~50 callbacks per task).
export interface TaskWaker {
  /** Wakes the task's workflow soon; returns at once (failures are the poll's to cover). */
  wake(taskId: string): void;
  /** Tasks with a signal in flight. */
  inFlight(): number;
  /** Signals sent and wakes folded into one already due, since start. */
  stats(): { sent: number; coalesced: number };
}

export function createTaskWaker(signal: (taskId: string) => Promise<unknown>): TaskWaker {
  const pending = new Map<string, { again: boolean }>();
  let sent = 0;
  let coalesced = 0;
  async function drive(taskId: string, entry: { again: boolean }): Promise<void> {
    try {
      do {
        entry.again = false;
        sent += 1;
        await signal(taskId).catch(() => undefined);
      } while (entry.again);
    } finally {
      pending.delete(taskId);
    }
  }
  return {
    wake(taskId) {
      const entry = pending.get(taskId);
      if (entry) {
        if (entry.again) coalesced += 1;
        entry.again = true;
        return;
      }
      const fresh = { again: false };
      pending.set(taskId, fresh);
      void drive(taskId, fresh);
    },
    inFlight: () => pending.size,
    stats: () => ({ sent, coalesced }),
  };
}
