// A provider's answer is read into memory only up to a size (docs/providers.md "Answer sizes"): a
// misbehaving server, a proxy's error page or a decompression bomb must not grow a worker's heap
// without bound. Bytes are counted as they arrive (after any Content-Encoding is undone), so a
// body without Content-Length, or one larger than it said, is cut at the limit too.

/** A JSON answer of one object (a job, a submit answer, a result): a prediction's webhook body is at most API_BODY_LIMIT (256 KB). */
export const PROVIDER_ANSWER_MAX_BYTES = 1024 * 1024;

/**
 * A listing page: Replicate's holds 100 predictions, each at most what one prediction answer
 * may be; 32 MiB leaves room for 100 of 320 KiB (list items carry no logs).
 */
export const PROVIDER_LISTING_MAX_BYTES = 32 * 1024 * 1024;

/** The answer was larger than the caller reads: it is unreadable, like an answer cut short. */
export class AnswerTooLargeError extends Error {
  constructor(
    readonly limitBytes: number,
    /** What Content-Length declared, when it already said so. */
    readonly declaredBytes: number | null,
  ) {
    super(`the answer is larger than ${describeBytes(limitBytes)}${declaredBytes === null ? '' : ` (Content-Length ${declaredBytes})`}; not read`);
    this.name = 'AnswerTooLargeError';
  }
}

const describeBytes = (n: number): string => (n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : `${n} bytes`);

/** The body as UTF-8 text (as `Response.text()` reads it), or AnswerTooLargeError past `maxBytes`; the rest is not downloaded. */
export async function readCappedText(res: Response, maxBytes: number): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel().catch(() => undefined);
    throw new AnswerTooLargeError(maxBytes, declared);
  }
  if (!res.body) return '';
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw new AnswerTooLargeError(maxBytes, null);
    }
    chunks.push(value);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}
