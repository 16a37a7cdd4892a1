// A provider's recent call latencies and their p95: the router's latency input (activities/routing.ts
// RouteStats keeps one per provider for its submits). Pure: the caller measures and records.

/** Keeps the last `size` latencies of one provider's calls. */
export class LatencyWindow {
  private readonly samples: number[] = [];
  constructor(
    private readonly size = 200,
    private readonly minSamples = 20,
  ) {}

  record(ms: number): void {
    this.samples.push(ms);
    if (this.samples.length > this.size) this.samples.shift();
  }

  /** The 95th percentile, or null until enough samples exist to trust it. */
  p95(): number | null {
    if (this.samples.length < this.minSamples) return null;
    const sorted = [...this.samples].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)] ?? null;
  }
}
