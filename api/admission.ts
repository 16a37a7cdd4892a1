// Admission control: may this process admit new paid work right now? Reads the fence row
// (mode, active region) at most once a second, so a mode change reaches every API process
// within about a second.
import type { Db } from '../db/client';
import { readFence, type FenceState } from '../db/fence';
import type { SystemMode } from '../domain/states';
import { problems } from './problem';

/** Modes in which new tasks are accepted (DESIGN.md §7). */
const ADMITTING: readonly SystemMode[] = ['NORMAL', 'DEGRADED_NOTIFY', 'DEGRADED_PROVIDER', 'QUEUE_ONLY'];
const WRITABLE: readonly SystemMode[] = [...ADMITTING, 'RECONCILE_ONLY'];

export interface Admission {
  state(): Promise<FenceState>;
  /** Throws a 503 problem unless new tasks may be created here. */
  assertCanCreate(): Promise<FenceState>;
  /** Throws a 503 problem unless facts may be written here (cancel). */
  assertCanWrite(): Promise<FenceState>;
}

export function createAdmission(db: Db, fence: { scope: string; region: string }, ttlMs = 1_000): Admission {
  let cached: { at: number; state: FenceState } | null = null;
  async function state(): Promise<FenceState> {
    const now = Date.now();
    if (cached && now - cached.at < ttlMs) return cached.state;
    const s = await readFence(db, fence.scope);
    if (!s) throw problems.unavailable(`no region fence for scope ${fence.scope}; run migrations`, 30);
    cached = { at: now, state: s };
    return s;
  }
  async function check(allowed: readonly SystemMode[], what: string): Promise<FenceState> {
    const s = await state();
    if (s.activeRegion !== fence.region) {
      throw problems.unavailable(`region ${fence.region} is not the active region (${s.activeRegion}); ${what} go there`, 30);
    }
    if (!allowed.includes(s.mode)) throw problems.unavailable(`system mode is ${s.mode}; ${what} are paused`, 30);
    return s;
  }
  return {
    state,
    assertCanCreate: () => check(ADMITTING, 'new tasks'),
    assertCanWrite: () => check(WRITABLE, 'changes'),
  };
}
