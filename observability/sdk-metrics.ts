// The Temporal SDK's own worker metrics (task slots, pollers, schedule-to-start latency, sticky
// cache, activity and workflow task outcomes). SDK Core exports them through its Prometheus
// exporter on a loopback port of its own; the worker's operator listener appends that text to
// ours, so one scrape of /metrics sees both (README "Deploying", docs/design.md §9).
import net from 'node:net';
import { Runtime } from '@temporalio/worker';
import type { Logger as TemporalLogger } from '@temporalio/common';

export interface SdkMetrics {
  /** Where SDK Core serves its exposition (http://127.0.0.1:<port>/metrics). */
  readonly url: string;
  /** The exposition text, fetched with a short timeout. */
  scrape(): Promise<string>;
}

/** A free loopback port: bound, read and released (SDK Core needs a fixed address to bind). */
function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Installs the SDK runtime (once per process, before any connection or worker) with our logger
 * and Core's Prometheus exporter on 127.0.0.1:`port` (0: a free port). Metric names keep Core's
 * `temporal_` prefix, counters end in `_total` and durations are in seconds, as Prometheus
 * names them; every series carries `service="worker"` like ours.
 */
export async function installRuntimeWithSdkMetrics(opts: { logger: TemporalLogger; port: number }): Promise<SdkMetrics> {
  const port = opts.port === 0 ? await freeLoopbackPort() : opts.port;
  Runtime.install({
    logger: opts.logger,
    // Signals are ours: the process outlives its Temporal worker while the region is fenced off.
    shutdownSignals: [],
    telemetryOptions: {
      metrics: {
        globalTags: { service: 'worker' },
        prometheus: { bindAddress: `127.0.0.1:${port}`, countersTotalSuffix: true, useSecondsForDurations: true },
      },
    },
  });
  const url = `http://127.0.0.1:${port}/metrics`;
  return {
    url,
    async scrape() {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (!res.ok) throw new Error(`SDK metrics answered ${res.status}`);
      return res.text();
    },
  };
}
