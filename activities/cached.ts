// A per-key answer (per provider, say) read at most once per `cacheMs` by this process: for
// facts that change slowly while the activities that need them run often.
import type { Clock } from '../domain/clock';

export function cachedPerKey<T>(clock: Clock, cacheMs: number, load: (key: string) => Promise<T>): (key: string) => Promise<T> {
  const cache = new Map<string, { at: number; value: T }>();
  return async (key) => {
    const now = clock.now().getTime();
    const hit = cache.get(key);
    if (hit && now - hit.at < cacheMs) return hit.value;
    const value = await load(key);
    cache.set(key, { at: now, value });
    return value;
  };
}
