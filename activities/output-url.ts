// An output URL comes from a third party: only https, only the provider's hosts, never an
// address inside our network (SSRF). The local simulator is the one exception, by config.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';

export class UnsafeUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsafeUrlError';
  }
}

function isPrivateAddress(address: string): boolean {
  if (isIP(address) === 4) {
    const [a = 0, b = 0] = address.split('.').map(Number);
    return (
      a === 10 || a === 127 || a === 0 || (a === 169 && b === 254) || (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127) || a >= 224
    );
  }
  const v6 = address.toLowerCase();
  return v6 === '::1' || v6 === '::' || v6.startsWith('fc') || v6.startsWith('fd') || v6.startsWith('fe80') ||
    (v6.startsWith('::ffff:') && isPrivateAddress(v6.slice(7)));
}

export async function validateOutputUrl(
  raw: string,
  opts: { allowedHosts: readonly string[]; allowPrivate: boolean },
): Promise<URL> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UnsafeUrlError('output URL does not parse');
  }
  if (url.protocol !== 'https:' && !(opts.allowPrivate && url.protocol === 'http:')) {
    throw new UnsafeUrlError(`output URL scheme ${url.protocol} is not allowed`);
  }
  if (url.username || url.password) throw new UnsafeUrlError('output URL carries credentials');
  if (!opts.allowedHosts.includes(url.hostname)) {
    throw new UnsafeUrlError(`output host ${url.hostname} is not on the provider's allow-list`);
  }
  if (!opts.allowPrivate) {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const addresses = isIP(host) ? [{ address: host }] : await lookup(host, { all: true });
    if (addresses.some((a) => isPrivateAddress(a.address))) {
      throw new UnsafeUrlError(`output host ${url.hostname} resolves to a private address`);
    }
  }
  return url;
}
