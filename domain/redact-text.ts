// Redaction of an error text (observability/redact.ts has the whole policy): keep the scheme, host
// and path of a URL, drop its query, fragment and credentials, and mask bearer / key-like tokens
// wherever they appear. Pure, so every layer (db/ included) can use it.

const URL_RE = /\b([a-z][a-z0-9+.-]*:\/\/)(?:[^\s/?#@'"<>]*@)?([^\s?#'"<>]*)(?:[?#][^\s'"<>]*)?/gi;
const TOKEN_PATTERNS: readonly [RegExp, string][] = [
  [/\b(Bearer|Basic|Key|Token)\s+[A-Za-z0-9._~+/=:-]{6,}/gi, '$1 [redacted]'],
  [/\bwhsec_[A-Za-z0-9+/=]+/g, 'whsec_[redacted]'],
  [/\b(r8|sk|pk|rk|key)_[A-Za-z0-9]{8,}/g, '$1_[redacted]'],
  [/\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/g, '[redacted-jwt]'],
  [/\bAKIA[0-9A-Z]{16}\b/g, '[redacted-access-key]'],
  // A callback URL's token authenticates the attempt it names (providers/callback-token.ts).
  [/(\/v1\/callbacks\/[^/\s?#'"<>]+\/)[^/\s?#'"<>]+/g, '$1[redacted]'],
  [/\b(X-Amz-[A-Za-z-]+|Signature|Credential|token|secret|api[_-]?key|password)=[^&\s'"]+/gi, '$1=[redacted]'],
];

/** `text` with URL queries and credentials and token-like strings removed. */
export function redactText(text: string): string {
  let out = text.replace(URL_RE, (_m, scheme: string, rest: string) => `${scheme}${rest}`);
  for (const [re, replacement] of TOKEN_PATTERNS) out = out.replace(re, replacement);
  return out;
}
