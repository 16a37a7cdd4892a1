// TLS toward Postgres, read from the connection URL as libpq reads it (docs/security.md
// "Connections"). node-postgres does not: it treats `require` and `verify-ca` as `verify-full`,
// has no `prefer` fallback to plaintext, and an `ssl` option given beside a URL that names any
// TLS parameter is replaced by the one it builds from the URL. So every connection this service
// makes (db/client.ts: the pools, the LISTEN connections, the migration's admin connection)
// takes its TLS from here: the URL without those parameters, and `ssl` built from them.
import fs from 'node:fs';
import type { ConnectionOptions } from 'node:tls';

/** The sslmode values honoured: what each checks is libpq's (`prefer` and `allow` may fall back to plaintext, and are refused). */
export const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];

/** The URL's TLS parameters: libpq's names, so the URL means the same to psql. */
export interface PgTlsParams {
  readonly mode: SslMode;
  /** `sslrootcert`: the CA file, or `system` for the system's CAs (libpq 16); unset: the system's. */
  readonly rootCert?: string | undefined;
  /** `sslcert` and `sslkey`: the client certificate and its key (both or neither). */
  readonly cert?: string | undefined;
  readonly key?: string | undefined;
}

/** A TLS parameter of the URL that cannot be honoured; the message names the parameter, never the URL. */
export class PgTlsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PgTlsError';
  }
}

const FILE_PARAMS = ['sslrootcert', 'sslcert', 'sslkey'] as const;
/** node-postgres's own spellings, which would replace the `ssl` built here: refused, sslmode says it. */
const REFUSED_PARAMS = ['ssl', 'uselibpqcompat', 'sslnegotiation'] as const;

function parseUrl(url: string): URL | null {
  try {
    return new URL(url);
  } catch {
    return null;
  }
}

/**
 * The URL's TLS parameters. A CA or client certificate without `sslmode` means `verify-full`
 * (TLS was asked for; the full check is the safe reading); no parameter at all means `disable`.
 * Throws PgTlsError for a mode or parameter that cannot be honoured.
 */
export function pgTlsParams(url: string): PgTlsParams {
  const params = parseUrl(url)?.searchParams;
  if (!params) {
    // node-postgres would read them its own way: refused rather than honoured differently.
    if (/[?&](ssl\w*|uselibpqcompat)=/.test(url)) throw new PgTlsError('TLS parameters need a URL that parses (a host, or `host=` for a socket)');
    return { mode: 'disable' };
  }
  for (const name of REFUSED_PARAMS) {
    if (params.has(name)) throw new PgTlsError(`the ${name} parameter is not supported: say it with sslmode (disable, require, verify-ca or verify-full)`);
  }
  const [rootCert, cert, key] = FILE_PARAMS.map((name) => params.get(name) || undefined);
  if (Boolean(cert) !== Boolean(key)) throw new PgTlsError('sslcert and sslkey go together (the client certificate and its key)');
  const given = params.get('sslmode');
  if (given !== null && !(SSL_MODES as readonly string[]).includes(given)) {
    throw new PgTlsError(
      `sslmode=${given} is not supported: disable, require, verify-ca or verify-full (node-postgres cannot fall back to plaintext, so prefer and allow are refused)`,
    );
  }
  const mode = (given as SslMode | null) ?? (rootCert || cert ? 'verify-full' : 'disable');
  if (mode === 'disable' && (rootCert || cert)) throw new PgTlsError('sslmode=disable with sslrootcert or sslcert: TLS files given, TLS off');
  // As libpq 16: the public CAs prove nothing about whose server it is without the host name check.
  if (rootCert === 'system' && mode !== 'verify-full') throw new PgTlsError(`sslrootcert=system needs sslmode=verify-full, not ${mode}`);
  return { mode, rootCert, cert, key };
}

/** The URL with TLS files added under libpq's parameter names (DATABASE_TLS_*_FILE); the URL unchanged when none is given. */
export function withTlsFiles(
  url: string,
  files: { readonly rootCert?: string | undefined; readonly cert?: string | undefined; readonly key?: string | undefined },
): string {
  const entries: [string, string | undefined][] = [
    ['sslrootcert', files.rootCert],
    ['sslcert', files.cert],
    ['sslkey', files.key],
  ];
  if (!entries.some(([, value]) => value)) return url;
  const u = new URL(url);
  for (const [name, value] of entries) if (value) u.searchParams.set(name, value);
  return u.toString();
}

/**
 * What node-postgres is given for `url`: the connection string without its TLS parameters, and
 * `ssl` as libpq would connect: `require` encrypts without checking the server (with a CA, as
 * `verify-ca`), `verify-ca` checks the certificate chain, `verify-full` the chain and that the
 * certificate names the host connected to (each failover candidate its own). Files are read now.
 */
export function pgConnectionOptions(
  url: string,
  readFile: (path: string) => Buffer = fs.readFileSync,
): { connectionString: string; ssl: false | ConnectionOptions } {
  const tls = pgTlsParams(url);
  const u = parseUrl(url);
  if (!u) return { connectionString: url, ssl: false };
  for (const name of ['sslmode', ...FILE_PARAMS]) u.searchParams.delete(name);
  const connectionString = u.toString();
  if (tls.mode === 'disable') return { connectionString, ssl: false };
  const ca = tls.rootCert && tls.rootCert !== 'system' ? { ca: readFile(tls.rootCert) } : {};
  const client = tls.cert && tls.key ? { cert: readFile(tls.cert), key: readFile(tls.key) } : {};
  const check: ConnectionOptions =
    tls.mode === 'verify-full' ? {} : tls.mode === 'verify-ca' || tls.rootCert ? { checkServerIdentity: () => undefined } : { rejectUnauthorized: false };
  return { connectionString, ssl: { ...ca, ...client, ...check } };
}
