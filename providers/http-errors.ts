// Classifies fetch (undici) failures by whether the request may have reached the server.
// Refused / DNS / TLS failures happen before a byte of the request is sent (the provider
// provably did not accept); a timeout or a reset after sending leaves the outcome unknown
// (docs/design.md §5 "Submit").
import { AnswerTooLargeError } from './capped-body';

export interface NetworkErrorClass {
  /** False only when the request provably never left this process. */
  readonly sent: boolean;
  /** True for a local mistake that a retry will not fix (bad URL, forbidden port). */
  readonly fatal: boolean;
  /** The error code (ECONNREFUSED, timeout, ...), never a secret. */
  readonly code: string;
  readonly reason: string;
}

/** Connection never established: nothing of the request was written. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_FAIL',
  'EAI_NONAME',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  // OpenSSL certificate verification failures (during the TLS handshake).
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH',
]);

function isNotSentCode(code: string): boolean {
  return NOT_SENT_CODES.has(code) || code.startsWith('CERT_') || code.startsWith('ERR_TLS_');
}

function codeOf(e: unknown): string | undefined {
  if (e && typeof e === 'object' && 'code' in e && typeof e.code === 'string') {
    return (e as { code: string }).code;
  }
  return undefined;
}

/**
 * @param err what fetch (or reading its body) threw
 * @param caller the caller's own signal, to tell "caller aborted" from "our timeout"
 */
export function classifyNetworkError(err: unknown, caller?: AbortSignal): NetworkErrorClass {
  // An answer over our size limit was sent and answered: unreadable, like one cut short.
  if (err instanceof AnswerTooLargeError) return { sent: true, fatal: false, code: 'answer-too-large', reason: err.message };
  const name = err instanceof Error || err instanceof DOMException ? err.name : '';
  if (name === 'TimeoutError') {
    return { sent: true, fatal: false, code: 'timeout', reason: 'timed out waiting for the provider' };
  }
  if (name === 'AbortError') {
    const code = caller?.aborted ? 'aborted' : 'abort';
    return { sent: true, fatal: false, code, reason: 'request aborted while in flight' };
  }
  const cause = err instanceof Error ? (err as Error & { cause?: unknown }).cause : undefined;
  let code = codeOf(cause) ?? codeOf(err);
  // Happy-eyeballs connect failures surface as an AggregateError of per-address errors.
  if (!code && cause instanceof AggregateError && cause.errors.length > 0) {
    const codes = cause.errors.map(codeOf);
    if (codes.every((c) => c !== undefined && isNotSentCode(c))) code = codes[0];
  }
  if (code === 'ERR_INVALID_URL' || (cause instanceof Error && cause.message === 'bad port')) {
    return { sent: false, fatal: true, code: code ?? 'bad-port', reason: 'request not sent: invalid URL or forbidden port' };
  }
  if (code && isNotSentCode(code)) {
    return { sent: false, fatal: false, code, reason: `request not sent: connection failed (${code})` };
  }
  const c = code ?? 'unknown-network-error';
  return { sent: true, fatal: false, code: c, reason: `connection failed after sending (${c})` };
}

/** Retry-After as delta-seconds or an HTTP date, in ms (>= 0), or null when absent/invalid. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return null;
  return Math.max(0, at - now);
}
