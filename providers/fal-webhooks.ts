// fal webhook signatures: ED25519 over "<request id>\n<user id>\n<timestamp>\n<hex sha256 of the
// raw body>", hex signature in X-Fal-Webhook-Signature, public keys from a JWKS URL. fal sends no
// key id, so a webhook is valid when any current key verifies it. Keys are cached for a TTL and
// refetched (at most once per minimum interval) when nothing verifies: that is how a rotation
// is picked up without waiting for the TTL.
import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { z } from 'zod';

export const FAL_HEADERS = {
  requestId: 'x-fal-webhook-request-id',
  userId: 'x-fal-webhook-user-id',
  timestamp: 'x-fal-webhook-timestamp',
  signature: 'x-fal-webhook-signature',
} as const;

const jwksSchema = z.looseObject({
  keys: z.array(z.looseObject({ kty: z.string(), crv: z.string().optional(), x: z.string().optional(), kid: z.string().optional() })),
});

/** The exact bytes fal signs. */
export function falSignedMessage(requestId: string, userId: string, timestamp: string, rawBody: Buffer): Buffer {
  const digest = createHash('sha256').update(rawBody).digest('hex');
  return Buffer.from(`${requestId}\n${userId}\n${timestamp}\n${digest}`, 'utf8');
}

/** True when `sigHex` is a valid ED25519 signature of `message` by one of `keys`. */
export function verifyFalSignature(keys: readonly KeyObject[], message: Buffer, sigHex: string): boolean {
  if (!/^[0-9a-f]{128}$/i.test(sigHex)) return false;
  const sig = Buffer.from(sigHex, 'hex');
  return keys.some((k) => {
    try {
      return verify(null, message, k, sig);
    } catch {
      return false;
    }
  });
}

/** Ed25519 public keys of a JWKS document; other key types are ignored. */
export function parseJwks(body: unknown): KeyObject[] {
  const parsed = jwksSchema.parse(body);
  const keys: KeyObject[] = [];
  for (const k of parsed.keys) {
    if (k.kty !== 'OKP' || k.crv !== 'Ed25519' || !k.x) continue;
    try {
      keys.push(createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.x }, format: 'jwk' }));
    } catch {
      // a malformed key is skipped; the others still count
    }
  }
  return keys;
}

export interface FalJwksOptions {
  readonly jwksUrl: string;
  /** How long fetched keys are trusted without refetching (fal: cache up to 24 h). */
  readonly ttlMs?: number;
  /** Refetches triggered by a failed verification happen at most this often. */
  readonly minRefetchIntervalMs?: number;
  readonly timeoutMs?: number;
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

/** A TTL cache of fal's webhook keys. */
export class FalJwks {
  private keys: KeyObject[] = [];
  private fetchedAt = Number.NEGATIVE_INFINITY;
  private attemptedAt = Number.NEGATIVE_INFINITY;
  private inflight: Promise<void> | null = null;
  /** Completed fetches (tests and metrics). */
  fetches = 0;
  private readonly ttlMs: number;
  private readonly minRefetchMs: number;
  private readonly now: () => number;

  constructor(private readonly opts: FalJwksOptions) {
    this.ttlMs = opts.ttlMs ?? 24 * 3_600_000;
    this.minRefetchMs = opts.minRefetchIntervalMs ?? 60_000;
    this.now = opts.now ?? Date.now;
  }

  /** The keys held now (possibly stale, possibly none). */
  get cached(): readonly KeyObject[] {
    return this.keys;
  }

  get fresh(): boolean {
    return this.keys.length > 0 && this.now() - this.fetchedAt < this.ttlMs;
  }

  /** True when a verification failure may trigger a refetch now. */
  get mayRefetch(): boolean {
    return this.now() - this.attemptedAt >= this.minRefetchMs;
  }

  /** Fetches the key set (one fetch at a time); throws when it cannot be fetched or holds no Ed25519 key. */
  refresh(): Promise<void> {
    this.inflight ??= this.load().finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  /** A refresh whose failure is only remembered (the next verification retries after the interval). */
  refreshInBackground(): void {
    if (!this.mayRefetch) return;
    this.refresh().catch(() => undefined);
  }

  private async load(): Promise<void> {
    this.attemptedAt = this.now();
    const res = await (this.opts.fetch ?? globalThis.fetch)(this.opts.jwksUrl, {
      headers: { accept: 'application/json' },
      signal: AbortSignal.timeout(this.opts.timeoutMs ?? 5_000),
      redirect: 'error',
    });
    if (!res.ok) throw new Error(`fal JWKS: HTTP ${res.status}`);
    const keys = parseJwks(await res.json());
    if (keys.length === 0) throw new Error('fal JWKS: no Ed25519 key');
    this.keys = keys;
    this.fetchedAt = this.now();
    this.fetches++;
  }
}
