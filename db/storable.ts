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

/** A copy of a parsed JSON value with every string, keys included, storable (the slow path only). */
function cleaned(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (Array.isArray(value)) return value.map(cleaned);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [storableText(k), cleaned(v)]));
  return value;
}

/** JSON text of `value` that a jsonb column accepts (the plain JSON.stringify when nothing needs replacing, the usual case). */
export function storableJsonText(value: unknown): string {
  const text = JSON.stringify(value);
  return SUSPECT.test(text) ? JSON.stringify(cleaned(JSON.parse(text))) : text;
}

/** `value` with every string storable, for a driver that serialises it itself (drizzle's jsonb). */
export function storableJson<T>(value: T): T {
  const text = JSON.stringify(value);
  return SUSPECT.test(text) ? (cleaned(JSON.parse(text)) as T) : value;
}

/**
 * The first place in a parsed JSON value holding a string Postgres cannot store ('' for the value
 * itself), or null. Iterative: a body nested as deep as its size allows cannot overflow the stack.
 */
export function unstorableTextAt(value: unknown): string | null {
  const pending: [unknown, string][] = [[value, '']];
  const bad = (s: string) => !s.isWellFormed() || s.includes('\u0000');
  const join = (path: string, seg: string) => (path === '' ? seg : `${path}.${seg}`);
  while (pending.length > 0) {
    const [v, path] = pending.pop()!;
    if (typeof v === 'string') {
      if (bad(v)) return path;
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) pending.push([v[i], join(path, String(i))]);
    } else if (v !== null && typeof v === 'object') {
      const entries: [string, unknown][] = Object.entries(v as Record<string, unknown>);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, item] = entries[i]!;
        // The path is shown in a problem's `field`: its own segments made storable too.
        const here = join(path, storableText(key));
        if (bad(key)) return here;
        pending.push([item, here]);
      }
    }
  }
  return null;
}
