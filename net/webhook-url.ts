// The rule for a tenant's webhook URL (docs/webhooks.md "Endpoints"), checked when an endpoint
// is created or changed and when a task names its own webhook_url. Names are resolved (and each
// answer checked) at connect by net/safe-fetch.ts, so a name that later resolves to a private
// address fails its attempt; this catches what can be seen in the URL itself.
import ipaddr from 'ipaddr.js';
import { isLoopbackHost, isPublicHost } from './host-rules';
import { publicAddress } from './safe-fetch';

/**
 * Null when `raw` is a URL webhooks may be sent to; else why not (for the problem's `url` field).
 * `allowLoopback` (WEBHOOK_ALLOW_PRIVATE, dev and tests) also admits http and a loopback host
 * (`localhost`, 127.0.0.0/8, ::1): a receiver on this machine. No setting admits a private,
 * link-local (the cloud metadata address) or other special address.
 */
export function webhookUrlProblem(raw: string, allowLoopback: boolean): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'must be an absolute URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an https URL';
  if (url.username || url.password) return 'must not carry credentials';
  if (url.protocol !== 'https:' && !allowLoopback) return 'must be an https URL';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (allowLoopback && isLoopbackHost(host)) return null;
  if (!isPublicHost(host) || (ipaddr.isValid(host) && !publicAddress(host))) return `must name a public host, not ${url.hostname}`;
  return null;
}
