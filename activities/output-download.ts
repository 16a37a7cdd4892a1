// A resumable output download (docs/decisions/0028): the provider's bytes go into an S3
// multipart upload one part at a time, and after every stored part the upload id, the parts
// and the byte offset are written to output_download. A retry (or a new run of the rescue
// after OUTPUT_AT_RISK) continues the same upload with `Range: bytes=<offset>-`, so what is
// already stored is neither downloaded nor uploaded again.
//
// The sha256 covers the whole object: a download that starts at byte 0 hashes as it streams; a
// resumed one re-hashes the completed object from storage (Node's hash state cannot be saved,
// and reading our own bucket is cheaper and never expires, unlike the provider's URL).
//
// An output that declares a length of at most one part has nothing to resume (the resume unit is
// a part): it is stored with one PUT under its key, without checkpoint rows or a multipart upload.
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { trace } from '@opentelemetry/api';
import { and, eq } from 'drizzle-orm';
import type { Dispatcher } from 'undici';
import { holdFence, type FenceToken } from '../db/fence';
import { outputDownload, type StorageLocation } from '../db/schema';
import { unsafeAddressIn } from '../net/safe-fetch';
import { UploadGoneError, type ObjectStorage, type StoredPart } from '../storage/s3';
import type { TaskActivityDeps } from './deps';
import { UnsafeUrlError } from './output-url';

/** The provider no longer has the output (or never had a usable one): nothing to retry. */
export class OutputGoneError extends Error {}

/** Our storage failed (not the provider): the rescue may turn to the fallback bucket. */
export class StorageWriteError extends Error {
  constructor(
    readonly location: StorageLocation,
    cause: unknown,
  ) {
    super(`${location} storage: ${(cause as Error).message ?? String(cause)}`, { cause });
    this.name = 'StorageWriteError';
  }
}

export interface DownloadTarget {
  readonly location: StorageLocation;
  readonly storage: ObjectStorage;
}

export interface DownloadedObject {
  readonly sha256: string;
  readonly size: number;
  readonly contentType: string;
  /** Bytes of the provider's response this call read (less than size after a resume). */
  readonly bytesTransferred: number;
  readonly resumed: boolean;
}

export interface DownloadRequest {
  readonly token: FenceToken;
  readonly taskId: string;
  readonly attemptId: string;
  readonly url: URL;
  readonly key: string;
  readonly target: DownloadTarget;
  readonly dispatcher: Dispatcher;
  readonly signal: AbortSignal;
  readonly heartbeat: (details: { phase: string; bytes: number }) => void;
  /** The attempt's checkpoint as the caller read it in its own transaction (null: none); absent: read here. */
  readonly checkpoint?: OutputCheckpoint | null;
}

/** A resumable download's state (one row per attempt). */
export type OutputCheckpoint = typeof outputDownload.$inferSelect;

const GONE = new Set([403, 404, 410]);

/** Runs a storage call, turning its failure into StorageWriteError (UploadGoneError passes through). */
/** Content types that say nothing of the bytes (besides video/*). */
const OPAQUE_TYPES = new Set(['application/octet-stream', 'binary/octet-stream']);

async function onStorage<T>(location: StorageLocation, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof UploadGoneError) throw err;
    throw new StorageWriteError(location, err);
  }
}

/** `bytes <start>-<end>/<total>` → start and total (total null for `*`). */
function parseContentRange(header: string | null): { start: number; total: number | null } | null {
  const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(header?.trim() ?? '');
  if (!m) return null;
  return { start: Number(m[1]), total: m[3] === '*' ? null : Number(m[3]) };
}

export function createOutputDownloader(deps: TaskActivityDeps) {
  const { db } = deps;
  const partBytes = deps.settings.outputPartBytes;
  const maxBytes = deps.settings.outputMaxBytes;

  type Checkpoint = OutputCheckpoint;

  const writeCheckpoint = (token: FenceToken, row: Checkpoint) =>
    db.transaction(async (tx) => {
      await holdFence(tx, token);
      await tx
        .insert(outputDownload)
        .values(row)
        .onConflictDoUpdate({
          target: outputDownload.attempt_id,
          set: {
            location: row.location,
            partial_key: row.partial_key,
            upload_id: row.upload_id,
            parts: row.parts,
            bytes_stored: row.bytes_stored,
            total_bytes: row.total_bytes,
            source_validator: row.source_validator,
            updated_at: new Date(),
          },
        });
    });
  const dropCheckpoint = (token: FenceToken, attemptId: string, uploadId: string) =>
    db.transaction(async (tx) => {
      await holdFence(tx, token);
      await tx.delete(outputDownload).where(and(eq(outputDownload.attempt_id, attemptId), eq(outputDownload.upload_id, uploadId)));
    });

  /** Aborts a checkpoint's upload (best effort: its storage may be the one that is down) and forgets it. */
  async function discard(token: FenceToken, cp: Checkpoint, stores: (l: StorageLocation) => ObjectStorage | null): Promise<void> {
    await stores(cp.location)
      ?.abortUpload(cp.partial_key, cp.upload_id)
      .catch(() => undefined);
    await dropCheckpoint(token, cp.attempt_id, cp.upload_id);
  }

  async function fetchFrom(req: DownloadRequest, offset: number, validator: string | null): Promise<Response> {
    // The bytes as stored, not compressed on the way: fetch would decode a gzip answer while its
    // Content-Length and any range count the encoded bytes.
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (offset > 0) {
      headers['range'] = `bytes=${offset}-`;
      if (validator) headers['if-range'] = validator;
    }
    const res = await fetch(req.url, { signal: req.signal, redirect: 'error', dispatcher: req.dispatcher, headers }).catch((err: unknown) => {
      const unsafe = unsafeAddressIn(err);
      throw unsafe ? new UnsafeUrlError(`output host ${req.url.hostname}: ${unsafe.message}`) : err;
    });
    // The transfer's span (activities/rescue-output.ts) carries the status, never the URL.
    trace.getActiveSpan()?.setAttribute('http.response.status_code', res.status);
    return res;
  }

  async function rehash(target: DownloadTarget, key: string): Promise<string> {
    const hash = createHash('sha256');
    const body = await onStorage(target.location, () => target.storage.readStream(key));
    for await (const chunk of body) hash.update(chunk as Buffer);
    return hash.digest('hex');
  }

  /** Completes and publishes a checkpoint whose parts hold the whole object; null (checkpoint dropped) if its upload is gone and no complete partial object is left. */
  async function finishStored(req: DownloadRequest, cp: Checkpoint): Promise<DownloadedObject | null> {
    const { target, key } = req;
    try {
      await onStorage(target.location, () => target.storage.completeUpload(cp.partial_key, cp.upload_id, cp.parts));
    } catch (err) {
      if (!(err instanceof UploadGoneError)) throw err;
      const partial = await onStorage(target.location, () => target.storage.head(cp.partial_key));
      if (partial?.size !== cp.total_bytes) {
        await dropCheckpoint(req.token, cp.attempt_id, cp.upload_id);
        return null;
      }
    }
    const sha256 = await rehash(target, cp.partial_key);
    await onStorage(target.location, () => target.storage.publish(cp.partial_key, key, { contentType: 'video/mp4', sha256 }));
    await dropCheckpoint(req.token, cp.attempt_id, cp.upload_id);
    await target.storage.delete(cp.partial_key).catch(() => undefined);
    return { sha256, size: cp.bytes_stored, contentType: 'video/mp4', bytesTransferred: 0, resumed: true };
  }

  /** The whole body of a one-part output, hashed, then stored under its key in one PUT. */
  async function storeWhole(req: DownloadRequest, body: ReadableStream<Uint8Array>, declared: number): Promise<DownloadedObject> {
    const { target, key } = req;
    const hash = createHash('sha256');
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of Readable.fromWeb(body)) {
      const buf = chunk as Buffer;
      size += buf.length;
      if (size > declared) throw new Error(`output longer than its declared ${declared} bytes`);
      hash.update(buf);
      chunks.push(buf);
    }
    if (size !== declared) throw new Error(`output truncated: ${size} of ${declared} bytes`);
    const sha256 = hash.digest('hex');
    await onStorage(target.location, () => target.storage.put(key, Buffer.concat(chunks, size), { contentType: 'video/mp4', sha256 }));
    req.heartbeat({ phase: 'stored', bytes: size });
    return { sha256, size, contentType: 'video/mp4', bytesTransferred: size, resumed: false };
  }

  return {
    /**
     * Streams the output into `target` under `${key}.partial`, then publishes it under `key` with
     * its sha256 in the object's metadata. `stores` resolves a checkpoint's location (another
     * target's stale upload is aborted there).
     */
    async download(req: DownloadRequest, stores: (l: StorageLocation) => ObjectStorage | null): Promise<DownloadedObject> {
      const { target, key } = req;
      const partial = `${key}.partial`;
      let [cp] =
        req.checkpoint !== undefined
          ? req.checkpoint === null
            ? []
            : [req.checkpoint]
          : await db.select().from(outputDownload).where(eq(outputDownload.attempt_id, req.attemptId));
      if (cp && cp.location !== target.location) {
        await discard(req.token, cp, stores);
        cp = undefined;
      }

      // Every byte was stored before (the last attempt stopped after its last part): finish the
      // upload, or find it finished, without asking the provider again.
      if (cp && cp.total_bytes !== null && cp.bytes_stored === cp.total_bytes && cp.parts.length > 0) {
        const done = await finishStored(req, cp);
        if (done) return done;
        cp = undefined;
      }

      // A resume needs the source's validator (ETag or Last-Modified, sent back as If-Range): without
      // one a changed source would answer 206 and splice two files into one object. Start over.
      if (cp && cp.bytes_stored > 0 && !cp.source_validator) {
        await discard(req.token, cp, stores);
        cp = undefined;
      }
      let res = await fetchFrom(req, cp?.bytes_stored ?? 0, cp?.source_validator ?? null);
      if (res.status === 416 && cp) {
        // The source is shorter than what we stored: it changed. Start over.
        await res.body?.cancel();
        await discard(req.token, cp, stores);
        cp = undefined;
        res = await fetchFrom(req, 0, null);
      }
      if (GONE.has(res.status)) {
        await res.body?.cancel();
        throw new OutputGoneError(`provider output answered ${res.status}`);
      }
      if (!res.ok || !res.body) throw new Error(`provider output answered ${res.status}`);
      // Media types are case-insensitive; S3 labels an object stored without one binary/octet-stream.
      // What the bytes are is the media step's to judge: this only refuses what says it is no video.
      const contentType = (res.headers.get('content-type') ?? 'video/mp4').split(';')[0]!.trim().toLowerCase();
      if (!contentType.startsWith('video/') && !OPAQUE_TYPES.has(contentType)) {
        await res.body.cancel();
        throw new OutputGoneError(`output content type ${contentType} is not a video`);
      }
      // A server that compressed the answer anyway: fetch hands over the decoded bytes, so the
      // encoded length says nothing of their size and a range would count encoded bytes.
      const encoded = !['', 'identity'].includes((res.headers.get('content-encoding') ?? '').trim().toLowerCase());
      if (encoded && res.status === 206) {
        await res.body.cancel();
        if (cp) await discard(req.token, cp, stores);
        throw new Error('provider answered an encoded range: starting over');
      }

      // An output that fits in one part has nothing to resume: a cut download loses at most that
      // one part either way. It is stored with one PUT under its key (atomic, as the publish
      // copy is) and no checkpoint rows, partial object or multipart upload.
      const declared = encoded ? null : res.headers.get('content-length');
      if (!cp && res.status === 200 && declared !== null && Number(declared) <= Math.min(partBytes, maxBytes)) {
        return storeWhole(req, res.body, Number(declared));
      }

      let resumed = false;
      let total: number | null = null;
      if (res.status === 206 && cp) {
        const range = parseContentRange(res.headers.get('content-range'));
        if (!range || range.start !== cp.bytes_stored) {
          await res.body.cancel();
          await discard(req.token, cp, stores);
          throw new Error(`provider answered range ${res.headers.get('content-range') ?? '(none)'} for offset ${cp.bytes_stored}: starting over`);
        }
        // An origin that ignores If-Range answers the range of whatever it holds now: a validator
        // other than the one the stored bytes came with would splice two files into one object.
        // Like with like: an ETag against the ETag, a date against Last-Modified.
        const stored = cp.source_validator!;
        const validator = res.headers.get(/^(W\/)?"/.test(stored) ? 'etag' : 'last-modified');
        if (validator !== null && validator !== stored) {
          await res.body.cancel();
          await discard(req.token, cp, stores);
          throw new Error('provider answered a range of a changed source (its validator differs): starting over');
        }
        resumed = true;
        total = range.total;
      } else {
        // A whole body: a first download, or the source changed (If-Range) and it starts over.
        if (cp) await discard(req.token, cp, stores);
        total = declared === null ? null : Number(declared);
        const uploadId = await onStorage(target.location, () => target.storage.createUpload(partial, { contentType: 'video/mp4' }));
        cp = {
          attempt_id: req.attemptId,
          task_id: req.taskId,
          location: target.location,
          partial_key: partial,
          upload_id: uploadId,
          parts: [],
          bytes_stored: 0,
          total_bytes: total,
          source_validator: res.headers.get('etag') ?? res.headers.get('last-modified'),
          updated_at: new Date(),
        };
        await writeCheckpoint(req.token, cp);
      }
      if (total !== null && total > maxBytes) {
        await res.body.cancel();
        throw new OutputGoneError(`output is ${total} bytes, over the limit`);
      }

      const checkpoint: Checkpoint = cp;
      const parts: StoredPart[] = [...checkpoint.parts];
      let stored = checkpoint.bytes_stored;
      let transferred = 0;
      const hash = resumed ? null : createHash('sha256');
      let pending: Buffer[] = [];
      let pendingBytes = 0;
      /** Stores one part and checkpoints it; `last`: the body has ended, so its length is known now too. */
      const storePart = async (body: Buffer, last = false) => {
        try {
          const part = await onStorage(target.location, () => target.storage.uploadPart(partial, checkpoint.upload_id, parts.length + 1, body));
          parts.push(part);
        } catch (err) {
          if (err instanceof UploadGoneError) await dropCheckpoint(req.token, req.attemptId, checkpoint.upload_id);
          throw err;
        }
        stored += body.length;
        await writeCheckpoint(req.token, { ...checkpoint, parts: [...parts], bytes_stored: stored, total_bytes: last ? (total ?? stored) : total });
        req.heartbeat({ phase: 'uploading', bytes: stored });
      };

      // for await pulls the body only as fast as parts are stored (backpressure). A reset or an
      // aborted body (activity cancelled) rejects here: a retryable failure, resumed next time.
      for await (const chunk of Readable.fromWeb(res.body as WebReadableStream<Uint8Array>)) {
        const buf = chunk as Buffer;
        transferred += buf.length;
        if (stored + pendingBytes + buf.length > maxBytes) throw new OutputGoneError('output exceeds the size limit');
        hash?.update(buf);
        pending.push(buf);
        pendingBytes += buf.length;
        while (pendingBytes >= partBytes) {
          const all = Buffer.concat(pending);
          await storePart(all.subarray(0, partBytes));
          pending = [all.subarray(partBytes)];
          pendingBytes = all.length - partBytes;
        }
      }
      // The last part's checkpoint says every byte is stored, even for a body of unknown length
      // (chunked): a run that stops after it finishes from the stored parts, without the provider.
      if (pendingBytes > 0 || parts.length === 0) await storePart(Buffer.concat(pending), true);
      else if (total === null) await writeCheckpoint(req.token, { ...checkpoint, parts: [...parts], bytes_stored: stored, total_bytes: stored });
      const size = stored;
      if (total !== null && size !== total) throw new Error(`output truncated: ${size} of ${total} bytes`);
      try {
        await onStorage(target.location, () => target.storage.completeUpload(partial, checkpoint.upload_id, parts));
      } catch (err) {
        if (err instanceof UploadGoneError) await dropCheckpoint(req.token, req.attemptId, checkpoint.upload_id);
        throw err;
      }
      const sha256 = hash ? hash.digest('hex') : await rehash(target, partial);
      await onStorage(target.location, () => target.storage.publish(partial, key, { contentType: 'video/mp4', sha256 }));
      await dropCheckpoint(req.token, req.attemptId, checkpoint.upload_id);
      await target.storage.delete(partial).catch(() => undefined);
      return { sha256, size, contentType: 'video/mp4', bytesTransferred: transferred, resumed };
    },
  };
}
