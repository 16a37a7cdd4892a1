// Reads a process's Prometheus /metrics (the worker's WORKER_METRICS_PORT, the API's OPS_PORT)
// on a fixed interval: what a benchmark measures of a process's inner state, without parsing
// its logs.

export interface MetricSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** The samples of a text exposition (comments skipped; label values unescaped). */
export function parseMetrics(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

export interface Scraper {
  /** Stops after one last scrape. */
  stop(): Promise<void>;
}

/** Scrapes `url` every `intervalMs` and hands each answer's samples, with the time it arrived, to `onScrape`. A failed scrape is skipped. */
export function startScraper(url: string, intervalMs: number, onScrape: (atMs: number, samples: MetricSample[]) => void): Scraper {
  let stopped = false;
  const once = async () => {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (res.ok) onScrape(Date.now(), parseMetrics(await res.text()));
      else await res.body?.cancel();
    } catch {
      // Not listening yet (the process is starting) or busy: the next scrape will tell.
    }
  };
  const loop = (async () => {
    while (!stopped) {
      const started = Date.now();
      await once();
      await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (Date.now() - started))));
    }
    await once();
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
