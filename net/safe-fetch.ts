// Fetching a URL a third party gave us (a provider's output URL; later a tenant's webhook URL)
// without letting it reach inside our network (SSRF). Two parts:
// - publicAddress(): only addresses ipaddr.js classifies as plain 'unicast' (IPv6: inside the
//   global unicast block 2000::/3 too, which leaves out IPv4-compatible ::a.b.c.d, ::/8 and the
//   like). IPv4-mapped, NAT64, 6to4, Teredo, site-local, CGNAT, benchmarking, multicast and every
//   other special range are refused.
// - createSafeDispatcher(): an undici Agent whose connect-time DNS lookup checks every answer
//   and connects only to checked addresses, so a name cannot resolve to a public address when
//   validated and to 127.0.0.1 when fetched (DNS rebinding). IP literals never reach the lookup:
//   check them with assertPublicHost() first.
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent } from 'undici';

export class UnsafeAddressError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsafeAddressError';
  }
}

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/** True for an address on the public internet. */
export function publicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const addr = ipaddr.parse(address);
  if (addr.range() !== 'unicast') return false;
  return addr.kind() === 'ipv4' || (addr as ipaddr.IPv6).match(GLOBAL_UNICAST_V6);
}

/** Throws UnsafeAddressError when `hostname` is an IP literal outside the public internet (names are checked at connect). */
export function assertPublicHost(hostname: string): void {
  const host = hostname.replace(/^\[|\]$/g, '');
  if (ipaddr.isValid(host) && !publicAddress(host)) throw new UnsafeAddressError(`address ${host} is not public`);
}

/** A DNS lookup with node's signature (tests pass one that answers what they need). */
export type Resolver = (hostname: string, options: LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

/** True for a loopback address (127.0.0.0/8, ::1, and 127.x mapped into IPv6). */
export function loopbackAddress(address: string): boolean {
  return ipaddr.isValid(address) && ipaddr.process(address).range() === 'loopback';
}

/** Wraps `resolve` so that a name resolving to any address `admit` refuses (by default: any non-public one) fails the connect. */
export function checkedLookup(resolve: Resolver = dnsLookup, admit: (address: string) => boolean = publicAddress): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const refused = addresses.find((a) => !admit(a.address));
      if (refused || addresses.length === 0) {
        return callback(new UnsafeAddressError(`${hostname} resolves to ${refused ? `non-public address ${refused.address}` : 'nothing'}`), '', 0);
      }
      // Node asks for every address (autoSelectFamily) or for one, depending on its options.
      if ((options as { all?: boolean }).all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      const first = addresses[0]!;
      return callback(null, first.address, first.family);
    });
  };
}

export interface SafeDispatcherOptions {
  /** Connect anywhere (the local simulator in dev and tests; OUTPUT_FETCH_ALLOW_PRIVATE). */
  readonly allowPrivate: boolean;
  /**
   * Public addresses and loopback, nothing else (a receiver on this machine in dev and tests:
   * WEBHOOK_ALLOW_PRIVATE). Private, link-local (169.254.169.254, the cloud metadata service)
   * and every other special range stay refused.
   */
  readonly allowLoopback?: boolean;
  readonly resolve?: Resolver;
}

/** The dispatcher to pass to fetch() for third-party URLs. */
export function createSafeDispatcher(opts: SafeDispatcherOptions): Agent {
  if (opts.allowPrivate) return new Agent({});
  const admit = opts.allowLoopback ? (a: string) => publicAddress(a) || loopbackAddress(a) : publicAddress;
  return new Agent({ connect: { lookup: checkedLookup(opts.resolve, admit) } });
}

/** The UnsafeAddressError a failed fetch carries in its cause chain, if any. */
export function unsafeAddressIn(err: unknown): UnsafeAddressError | null {
  for (let e = err, depth = 0; e && depth < 6; e = (e as { cause?: unknown }).cause, depth += 1) {
    if (e instanceof UnsafeAddressError) return e;
  }
  return null;
}
