// Text Postgres can store. Its text and jsonb types refuse U+0000 and a UTF-16 surrogate without
// its pair (JSON.stringify writes one as a \udXXX escape, which jsonb rejects), and the refusal
// fails the whole statement. Input from a tenant with either is refused with a 400 naming the
// field (api/app.ts); what a provider sends is its truth and is stored anyway, each such
// character replaced by U+FFFD, so a model's log line can never make a callback or a poll fail
// for ever.

/** A NUL, or an escape JSON.stringify writes only for a lone surrogate (or a literal backslash-u: a false alarm, harmless). */
const SUSPECT = /\\u(0000|d[89a-f])/i;

/** `s` storable: lone surrogates and NULs replaced by U+FFFD. */
export function storableText(s: string): string {
  return s.toWellFormed().replaceAll('\u0000', '\uFFFD');
}

const replacer = (_key: string, value: unknown): unknown => (typeof value === 'string' ? storableText(value) : value);

/** JSON text of `value` that a jsonb column accepts (the plain JSON.stringify when nothing needs replacing, the usual case). */
export function storableJsonText(value: unknown): string {
  const text = JSON.stringify(value);
  return SUSPECT.test(text) ? JSON.stringify(value, replacer) : text;
}

/** `value` with every string storable, for a driver that serialises it itself (drizzle's jsonb). */
export function storableJson<T>(value: T): T {
  const text = JSON.stringify(value);
  return SUSPECT.test(text) ? (JSON.parse(JSON.stringify(value, replacer)) as T) : value;
}

/** The first place in a parsed JSON value holding a string Postgres cannot store ('' for the value itself), or null. */
export function unstorableTextAt(value: unknown, path = ''): string | null {
  if (typeof value === 'string') return value.isWellFormed() && !value.includes('\u0000') ? null : path;
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const at = unstorableTextAt(item, path === '' ? String(i) : `${path}.${i}`);
      if (at !== null) return at;
    }
    return null;
  }
  if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      // The path is shown in a problem's `field`: its own segments made storable too.
      const here = path === '' ? storableText(key) : `${path}.${storableText(key)}`;
      const at = unstorableTextAt(key, here) ?? unstorableTextAt(item, here);
      if (at !== null) return at;
    }
  }
  return null;
}
