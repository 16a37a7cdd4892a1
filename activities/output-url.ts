// An output URL comes from a third party: only https, only the provider's hosts (exact names or
// `*.domain` subdomain rules, as providers document them: net/host-rules.ts), never an address
// inside our network (SSRF). The address check is net/safe-fetch.ts: IP literals here, names at
// connect time by the fetch's dispatcher (so the address checked is the address used). The local
// simulator is the one exception, by config.
import { hostAllowed } from '../net/host-rules';
import { assertPublicHost, UnsafeAddressError } from '../net/safe-fetch';

export class UnsafeUrlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnsafeUrlError';
  }
}

/**
 * The output's host is not on the provider's allow-list: a policy refusal an operator can lift
 * (PROVIDER_<P>_OUTPUT_HOSTS) while the URL is still valid, unlike a refused scheme or address.
 */
export class OutputHostNotAllowedError extends UnsafeUrlError {
  constructor(readonly host: string) {
    super(`output host ${host} is not on the provider's allow-list`);
    this.name = 'OutputHostNotAllowedError';
  }
}

export function validateOutputUrl(raw: string, opts: { allowedHosts: readonly string[]; allowPrivate: boolean }): URL {
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
  if (!opts.allowPrivate) {
    try {
      assertPublicHost(url.hostname);
    } catch (err) {
      if (err instanceof UnsafeAddressError) throw new UnsafeUrlError(`output host ${url.hostname}: ${err.message}`);
      throw err;
    }
  }
  if (!hostAllowed(url.hostname, opts.allowedHosts)) throw new OutputHostNotAllowedError(url.hostname);
  return url;
}
