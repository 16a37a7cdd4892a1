// The rule for a tenant's webhook URL (docs/webhooks.md "Endpoints"), checked when an endpoint
// is created or changed and when a task names its own webhook_url. Names are resolved (and each
// answer checked) at connect by net/safe-fetch.ts, so a name that later resolves to a private
// address fails its attempt; this catches what can be seen in the URL itself.
import ipaddr from 'ipaddr.js';
import { isPublicHost } from '../config/profile';
import { publicAddress } from './safe-fetch';

/** Null when `raw` is a URL webhooks may be sent to; else why not (for the problem's `url` field). */
export function webhookUrlProblem(raw: string, allowPrivate: boolean): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'must be an absolute URL';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an https URL';
  if (url.username || url.password) return 'must not carry credentials';
  if (allowPrivate) return null;
  if (url.protocol !== 'https:') return 'must be an https URL';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!isPublicHost(host) || (ipaddr.isValid(host) && !publicAddress(host))) return `must name a public host, not ${url.hostname}`;
  return null;
}
