// The containers' health probe (the Dockerfile's HEALTHCHECK, the Kubernetes exec probes):
// `node dist/healthcheck.js <api|worker> [/healthz|/readyz]` GETs that path of the process's
// operator listener (OPS_PORT or WORKER_METRICS_PORT on OPS_LISTEN_HOST, with OPS_BEARER_TOKEN
// when set) and exits 0 on a 2xx, else 1. In Node: the slim images carry no curl, and a probe
// with the token in a manifest's httpHeaders would put the secret in the manifest.
import { loadOpsListenerSettings } from '../config/env';

const [service, probePath = '/healthz'] = process.argv.slice(2);
if ((service !== 'api' && service !== 'worker') || (probePath !== '/healthz' && probePath !== '/readyz')) {
  process.stderr.write('usage: healthcheck <api|worker> [/healthz|/readyz]\n');
  process.exit(2);
}
const settings = loadOpsListenerSettings();
const port = service === 'api' ? settings.OPS_PORT : settings.WORKER_METRICS_PORT;
// A listener on every interface answers on loopback too.
const bound = settings.OPS_LISTEN_HOST.replace(/^\[|\]$/g, '');
const host = bound === '0.0.0.0' ? '127.0.0.1' : bound === '::' ? '::1' : bound;
const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}${probePath}`;
try {
  const res = await fetch(url, {
    headers: settings.OPS_BEARER_TOKEN ? { authorization: `Bearer ${settings.OPS_BEARER_TOKEN}` } : {},
    signal: AbortSignal.timeout(4_000),
  });
  if (!res.ok) process.stderr.write(`healthcheck: ${url} answered ${res.status}\n`);
  process.exit(res.ok ? 0 : 1);
} catch (err) {
  process.stderr.write(`healthcheck: ${url}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
