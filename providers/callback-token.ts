// The token in a provider's callback URL (/v1/callbacks/<provider>/<token>). The attempt id is
// the provider idempotency key but it is not secret (an unkeyed hash of the task id, returned by
// GET /v1/tasks/:id), so the URL carries a keyed token instead (docs/decisions/0016):
//   token = base64url( AES-256(k_enc, attempt id bytes) ‖ HMAC-SHA256(k_mac, attempt id)[0..16] )
// The first block hides the attempt id (one AES block is a keyed permutation of its 16 bytes);
// the tag authenticates it. The API recovers the attempt id and checks the tag in constant time
// before it reads anything, so a guessed or forged token costs one block decryption.
// The key rotates without orphaning the URLs of attempts in flight: tokens are minted under the
// current secret and still accepted under the retired ones listed beside it (docs/security.md
// "Rotating the callback token secret").
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TAG_BYTES = 16;
/**
 * base64url of 32 bytes, in its one canonical spelling: 43 characters carry 258 bits, so the last
 * one's two low bits are padding and must be zero (A, E, I, …, w, 0, 4, 8). A decoder ignores them,
 * so without this rule every token would have four spellings, each a URL of its own (a remembered
 * token, a rate limit per URL) for one attempt.
 */
const TOKEN = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

export interface CallbackTokens {
  /** The URL token of an attempt under the current secret (deterministic: a retried submit hands out the same URL). */
  tokenFor(attemptId: string): string;
  /** The attempt id a token stands for under the current or a retired secret, or null when the token is not one of ours. */
  attemptIdOf(token: string): string | null;
  /** Whether `token` is the attempt's token under the current or a retired secret (a provider echoing our URL). */
  isTokenOf(attemptId: string, token: string): boolean;
}

const uuidBytes = (id: string): Buffer => Buffer.from(id.replace(/-/g, ''), 'hex');
const uuidString = (b: Buffer): string => {
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
};

/**
 * One AES-256 block permutation (ECB, no padding), kept for the process: ECB carries no state
 * from one block to the next and, without padding, update() returns each block whole, so one
 * cipher serves every call and a callback pays no cipher set-up (issue #19's profile).
 */
function blockCipher(key: Buffer, encrypt: boolean): (input: Buffer) => Buffer {
  const c = encrypt ? createCipheriv('aes-256-ecb', key, null) : createDecipheriv('aes-256-ecb', key, null);
  c.setAutoPadding(false);
  return (input) => {
    if (input.length !== 16) throw new RangeError('one AES block is 16 bytes');
    return c.update(input);
  };
}

interface TokenKey {
  mint(attemptId: string): string;
  open(token: string): string | null;
}

function tokenKey(secret: string): TokenKey {
  const derive = (info: string) => Buffer.from(hkdfSync('sha256', secret, 'vidorch-callback-token', info, 32));
  const encKey = derive('enc');
  const macKey = derive('mac');
  const encrypt = blockCipher(encKey, true);
  const decrypt = blockCipher(encKey, false);
  const tag = (attemptId: string) => createHmac('sha256', macKey).update(attemptId.toLowerCase()).digest().subarray(0, TAG_BYTES);
  return {
    mint: (attemptId) => Buffer.concat([encrypt(uuidBytes(attemptId)), tag(attemptId)]).toString('base64url'),
    open(token) {
      const raw = Buffer.from(token, 'base64url');
      if (raw.length !== 16 + TAG_BYTES) return null;
      const attemptId = uuidString(decrypt(raw.subarray(0, 16)));
      return timingSafeEqual(tag(attemptId), raw.subarray(16)) ? attemptId : null;
    },
  };
}

/**
 * How many verified tokens a process remembers (attemptIdOf). A provider sends many callbacks
 * to one URL (progress events, retries, redeliveries), so the busiest tokens are few; the bound
 * keeps memory small (about 200 bytes an entry) whatever the traffic.
 */
const VERIFIED_TOKENS_KEPT = 4096;

/** Tokens minted under `secret`, and accepted under it or any of `retired` (oldest last). */
export function createCallbackTokens(secret: string, retired: readonly string[] = [], opts: { verifiedKept?: number } = {}): CallbackTokens {
  const current = tokenKey(secret);
  const keys = [current, ...retired.filter((r) => r !== secret).map(tokenKey)];
  const kept = opts.verifiedKept ?? VERIFIED_TOKENS_KEPT;
  const verified = new Map<string, string>();
  function attemptIdOf(token: string): string | null {
    // A token that passed the check below maps to the same attempt id for good (the token is a
    // function of the attempt id and a key this instance holds): the exact string seen again
    // skips the block decryption and the HMAC. Only verified tokens are kept, so a forged or
    // guessed one always takes the full check (docs/decisions/0016-keyed-callback-tokens.md).
    const known = verified.get(token);
    if (known !== undefined) return known;
    if (!TOKEN.test(token)) return null;
    for (const key of keys) {
      const attemptId = key.open(token);
      if (!attemptId) continue;
      // First in, first out: the oldest entry leaves when the bound is reached.
      if (verified.size >= kept) verified.delete(verified.keys().next().value!);
      verified.set(token, attemptId);
      return attemptId;
    }
    return null;
  }
  return {
    tokenFor(attemptId) {
      if (!UUID.test(attemptId)) throw new Error(`attempt id ${attemptId} is not a UUID`);
      return current.mint(attemptId);
    },
    attemptIdOf,
    isTokenOf(attemptId, token) {
      return UUID.test(attemptId) && attemptIdOf(token) === attemptId.toLowerCase();
    },
  };
}

/** The callback URL handed to a provider for an attempt. */
export function callbackUrl(publicBaseUrl: string, provider: string, token: string): string {
  return `${publicBaseUrl}/v1/callbacks/${encodeURIComponent(provider)}/${token}`;
}

/** The token of a callback URL that `callbackUrl` built (its last non-empty path segment), or null. */
export function callbackTokenOf(url: string | null | undefined): string | null {
  if (!url) return null;
  try {
    const seg = new URL(url).pathname
      .split('/')
      .filter((s) => s.length > 0)
      .pop();
    return seg ? decodeURIComponent(seg) : null;
  } catch {
    return null;
  }
}
