// Host allow-lists as providers document them: an exact host (`replicate.delivery`), or a
// subdomain rule (`*.replicate.delivery`: "replicate.delivery and its subdomains" is written as
// both). A rule matches by whole DNS labels, so `*.replicate.delivery` takes
// `pbxt.replicate.delivery` and `a.b.replicate.delivery`, never `replicate.delivery.evil.example`
// nor `evilreplicate.delivery`, and never the bare `replicate.delivery` (list it too). Pure: the
// output guard (activities/output-url.ts) and the production profile (config/profile.ts) share it.
import ipaddr from 'ipaddr.js';

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** A host name in the form a URL parser gives it (lower case, ASCII): dot-separated labels, or an IP literal. */
function isHostName(h: string): boolean {
  if (ipaddr.isValid(h.replace(/^\[|\]$/g, ''))) return true;
  return h.length <= 253 && h.split('.').every((label) => LABEL.test(label));
}

/**
 * Why `rule` is not a host rule, or null. A subdomain rule must name at least two labels after
 * `*.` (`*.com` would let any site in) and no address (`*.10.0.0.1` names nothing).
 */
export function hostRuleProblem(rule: string): string | null {
  const r = rule.trim().toLowerCase();
  if (!r.startsWith('*.')) return isHostName(r) && !r.includes('*') ? null : `"${rule}" is not a host name or "*.<domain>"`;
  const domain = r.slice(2);
  if (ipaddr.isValid(domain)) return `"${rule}": a subdomain rule cannot cover an address`;
  if (!isHostName(domain)) return `"${rule}" is not "*.<domain>"`;
  if (domain.split('.').length < 2) return `"${rule}" is too broad: name the provider's domain (e.g. *.replicate.delivery)`;
  return null;
}

/** The domain a rule covers: the host itself, or for `*.d` the domain `d` whose subdomains it takes. */
export function ruleDomain(rule: string): string {
  const r = rule.trim().toLowerCase();
  return r.startsWith('*.') ? r.slice(2) : r;
}

/** Whether `hostname` (as `new URL(…).hostname` gives it) is allowed by one of `rules`. */
export function hostAllowed(hostname: string, rules: readonly string[]): boolean {
  const host = hostname.toLowerCase();
  return rules.some((raw) => {
    const rule = raw.trim().toLowerCase();
    if (!rule.startsWith('*.')) return host === rule;
    const suffix = rule.slice(1); // ".replicate.delivery"
    if (!host.endsWith(suffix)) return false;
    // At least one whole label in front: never "", never ".replicate.delivery" or "a..replicate.delivery".
    return host
      .slice(0, -suffix.length)
      .split('.')
      .every((label) => label.length > 0);
  });
}

/** A host name or address literal that may be a public endpoint: not loopback, private, link-local, … */
export function isPublicHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return false;
  if (!ipaddr.isValid(h)) return true; // a DNS name: resolved (and checked) where it is fetched
  return ipaddr.process(h).range() === 'unicast';
}

/** `localhost` or a loopback address (127.0.0.0/8, ::1, and 127.x mapped into IPv6), brackets or not. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  return ipaddr.isValid(h) && ipaddr.process(h).range() === 'loopback';
}
