// A value loaded at most once per period and shared by everyone who asks within it, the load
// in flight included: a flood of readiness probes or scrapes costs one read (or one render).
export function reusedFor<T>(ttlMs: number, load: () => Promise<T>): () => Promise<T> {
  let entry: { at: number; value: Promise<T> } | null = null;
  return () => {
    const now = Date.now();
    if (ttlMs > 0 && entry && now - entry.at < ttlMs) return entry.value;
    const value = load();
    const current = { at: now, value };
    entry = current;
    // A failed load is not kept: the next caller tries again.
    value.catch(() => {
      if (entry === current) entry = null;
    });
    return value;
  };
}
