// Object storage for rescued outputs. A real S3-compatible server in dev and tests (versitygw),
// any S3 in production.
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NotFound,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { SpanKind, type Span } from '@opentelemetry/api';
import { inSpan } from '../observability/trace-context';

export interface StorageConfig {
  readonly endpoint: string;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly forcePathStyle: boolean;
  readonly bucket: string;
}

export interface StoredObject {
  readonly size: number;
  readonly contentType: string | null;
  readonly sha256: string | null;
}

/** A part of a multipart upload already stored (its number, ETag and size). */
export interface StoredPart {
  readonly n: number;
  readonly etag: string;
  readonly size: number;
}

/** The multipart upload an id names is gone (completed, aborted, expired): start a new one. */
export class UploadGoneError extends Error {}

export interface ObjectStorage {
  readonly bucket: string;
  readonly region: string;
  /** Creates a multipart upload for `key`; returns its upload id. */
  createUpload(key: string, opts: { contentType: string; sha256?: string }): Promise<string>;
  /** Stores one part (S3: at least 5 MiB except the last). */
  uploadPart(key: string, uploadId: string, n: number, body: Buffer): Promise<StoredPart>;
  completeUpload(key: string, uploadId: string, parts: readonly StoredPart[]): Promise<void>;
  abortUpload(key: string, uploadId: string): Promise<void>;
  /** The object as a stream (re-hashing what is stored). */
  readStream(key: string): Promise<Readable>;
  /** Keys under `prefix`, a page at a time (`after`: the last key of the previous page). */
  list(prefix: string, opts: { after?: string; limit: number }): Promise<Array<{ key: string; size: number }>>;
  /** Streams `key` of `from` (another endpoint) into `key` here as a multipart upload, published only if its sha256 is `sha256`. */
  copyFrom(from: ObjectStorage, key: string, opts: { contentType: string; sha256: string }): Promise<'copied' | 'checksum-mismatch'>;
  head(key: string): Promise<StoredObject | null>;
  put(key: string, body: Buffer, opts: { contentType: string; sha256: string }): Promise<void>;
  /** Server-side copy that also sets the object's metadata (publishes a verified object under its final key). */
  publish(fromKey: string, toKey: string, opts: { contentType: string; sha256: string }): Promise<void>;
  delete(key: string): Promise<void>;
  /** A presigned GET; `served` sets the answer's Content-Type and a Content-Disposition filename (the stored object's metadata stays). */
  presignGet(key: string, ttlSeconds: number, served?: { contentType: string; filename: string }): Promise<string>;
  read(key: string): Promise<Buffer>;
  /** `length` bytes from `offset` (fewer at the end of the object). */
  readRange(key: string, offset: number, length: number): Promise<Buffer>;
  readonly client: S3Client;
}

/** Part size of a copy between endpoints (S3: at least 5 MiB but the last). */
const COPY_PART_BYTES = 8 * 1024 * 1024;

const isUploadGone = (err: unknown): boolean => err instanceof S3ServiceException && (err.name === 'NoSuchUpload' || err.$metadata.httpStatusCode === 404);

const isNotFound = (err: unknown): boolean =>
  err instanceof NotFound || (err instanceof S3ServiceException && (err.$metadata.httpStatusCode === 404 || err.name === 'NoSuchKey'));

/**
 * A client span per S3 operation (docs/observability.md): the operation, the bucket and the
 * object key (ids only: docs/design.md §5), the HTTP status of a failure. Presigning is local
 * signing, not a call, and gets no span: a presigned URL is a credential.
 */
function s3Span<T>(operation: string, bucket: string, key: string, fn: (span: Span) => Promise<T>): Promise<T> {
  return inSpan(
    `S3.${operation}`,
    { 'rpc.system': 'aws-api', 'rpc.service': 'S3', 'rpc.method': operation, 'aws.s3.bucket': bucket, 'aws.s3.key': key },
    async (span: Span) => {
      try {
        return await fn(span);
      } catch (err) {
        const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
        if (status !== undefined) span.setAttribute('http.response.status_code', status);
        throw err;
      }
    },
    SpanKind.CLIENT,
  );
}

export function createObjectStorage(cfg: StorageConfig): ObjectStorage {
  const client = new S3Client({
    endpoint: cfg.endpoint,
    region: cfg.region,
    forcePathStyle: cfg.forcePathStyle,
    credentials: { accessKeyId: cfg.accessKeyId, secretAccessKey: cfg.secretAccessKey },
    // versitygw and most S3-compatible servers do not implement the newer default checksums.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // An unreachable endpoint fails fast, so a rescue turns to the fallback bucket in time.
    requestHandler: { connectionTimeout: 3_000, requestTimeout: 60_000 },
    maxAttempts: 2,
  });
  const bucket = cfg.bucket;
  const storage: ObjectStorage = {
    bucket,
    region: cfg.region,
    client,
    head(key) {
      // A miss is an answer (the object is not there yet), not a failed operation.
      return s3Span('HeadObject', bucket, key, async (span) => {
        try {
          const out = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
          return {
            size: out.ContentLength ?? 0,
            contentType: out.ContentType ?? null,
            sha256: out.Metadata?.['sha256'] ?? null,
          };
        } catch (err) {
          if (!isNotFound(err)) throw err;
          span.setAttribute('http.response.status_code', 404);
          return null;
        }
      });
    },
    async createUpload(key, opts) {
      const out = await s3Span('CreateMultipartUpload', bucket, key, () =>
        client.send(
          new CreateMultipartUploadCommand({
            Bucket: bucket,
            Key: key,
            ContentType: opts.contentType,
            ...(opts.sha256 ? { Metadata: { sha256: opts.sha256 } } : {}),
          }),
        ),
      );
      if (!out.UploadId) throw new Error(`no upload id for ${key}`);
      return out.UploadId;
    },
    async uploadPart(key, uploadId, n, body) {
      try {
        const out = await s3Span('UploadPart', bucket, key, () =>
          client.send(new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumber: n, Body: body })),
        );
        return { n, etag: out.ETag ?? '', size: body.length };
      } catch (err) {
        if (isUploadGone(err)) throw new UploadGoneError(`upload of ${key} is gone`, { cause: err });
        throw err;
      }
    },
    async completeUpload(key, uploadId, parts) {
      try {
        await s3Span('CompleteMultipartUpload', bucket, key, () =>
          client.send(
            new CompleteMultipartUploadCommand({
              Bucket: bucket,
              Key: key,
              UploadId: uploadId,
              MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.n, ETag: p.etag })) },
            }),
          ),
        );
      } catch (err) {
        if (isUploadGone(err)) throw new UploadGoneError(`upload of ${key} is gone`, { cause: err });
        throw err;
      }
    },
    async abortUpload(key, uploadId) {
      try {
        await s3Span('AbortMultipartUpload', bucket, key, () => client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId })));
      } catch (err) {
        if (!isUploadGone(err)) throw err;
      }
    },
    async readStream(key) {
      const out = await s3Span('GetObject', bucket, key, () => client.send(new GetObjectCommand({ Bucket: bucket, Key: key })));
      if (!out.Body) throw new Error(`object ${key} has no body`);
      return out.Body as Readable;
    },
    async list(prefix, opts) {
      // ListObjectsV2 answers at most 1,000 keys a request (MaxKeys above that is capped): page
      // with its continuation token until `limit` keys or the end, so a short answer means the end.
      const objects: Array<{ key: string; size: number }> = [];
      if (opts.limit <= 0) return objects;
      let token: string | undefined;
      do {
        const out = await s3Span('ListObjectsV2', bucket, prefix, () =>
          client.send(
            new ListObjectsV2Command({
              Bucket: bucket,
              Prefix: prefix,
              MaxKeys: Math.min(1_000, opts.limit - objects.length),
              ...(token ? { ContinuationToken: token } : opts.after ? { StartAfter: opts.after } : {}),
            }),
          ),
        );
        for (const o of out.Contents ?? []) objects.push({ key: o.Key ?? '', size: o.Size ?? 0 });
        token = out.IsTruncated ? out.NextContinuationToken : undefined;
      } while (token && objects.length < opts.limit);
      return objects.slice(0, opts.limit);
    },
    async copyFrom(from, key, opts) {
      // The sha256 goes on the upload up front and the upload is completed only if the bytes
      // match it, so no object with a wrong checksum ever appears under the key.
      const uploadId = await storage.createUpload(key, opts);
      try {
        const hash = createHash('sha256');
        const parts: StoredPart[] = [];
        let pending: Buffer[] = [];
        let pendingBytes = 0;
        const flush = async (body: Buffer) => parts.push(await storage.uploadPart(key, uploadId, parts.length + 1, body));
        for await (const chunk of await from.readStream(key)) {
          const buf = chunk as Buffer;
          hash.update(buf);
          pending.push(buf);
          pendingBytes += buf.length;
          if (pendingBytes >= COPY_PART_BYTES) {
            await flush(Buffer.concat(pending));
            pending = [];
            pendingBytes = 0;
          }
        }
        if (pendingBytes > 0 || parts.length === 0) await flush(Buffer.concat(pending));
        if (hash.digest('hex') !== opts.sha256) {
          await storage.abortUpload(key, uploadId);
          return 'checksum-mismatch';
        }
        await storage.completeUpload(key, uploadId, parts);
        return 'copied';
      } catch (err) {
        await storage.abortUpload(key, uploadId).catch(() => undefined);
        throw err;
      }
    },
    async put(key, body, opts) {
      await s3Span('PutObject', bucket, key, () =>
        client.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: key,
            Body: body,
            ContentType: opts.contentType,
            Metadata: { sha256: opts.sha256 },
          }),
        ),
      );
    },
    async publish(fromKey, toKey, opts) {
      await s3Span('CopyObject', bucket, toKey, () =>
        client.send(
          new CopyObjectCommand({
            Bucket: bucket,
            Key: toKey,
            CopySource: `${bucket}/${fromKey.split('/').map(encodeURIComponent).join('/')}`,
            MetadataDirective: 'REPLACE',
            ContentType: opts.contentType,
            Metadata: { sha256: opts.sha256 },
          }),
        ),
      );
    },
    async delete(key) {
      await s3Span('DeleteObject', bucket, key, () => client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key })));
    },
    presignGet(key, ttlSeconds, served) {
      // The file name goes into a header value: only characters that need no quoting or encoding.
      const filename = served?.filename.replace(/[^A-Za-z0-9._-]/g, '_');
      const response = served ? { ResponseContentType: served.contentType, ResponseContentDisposition: `inline; filename="${filename}"` } : {};
      return getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: key, ...response }), { expiresIn: ttlSeconds });
    },
    async read(key) {
      const bytes = await s3Span('GetObject', bucket, key, async () =>
        (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToByteArray(),
      );
      return Buffer.from(bytes ?? []);
    },
    async readRange(key, offset, length) {
      if (length <= 0) return Buffer.alloc(0);
      const range = `bytes=${offset}-${offset + length - 1}`;
      const bytes = await s3Span('GetObject', bucket, key, async () =>
        (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key, Range: range }))).Body?.transformToByteArray(),
      );
      return Buffer.from(bytes ?? []);
    },
  };
  return storage;
}

/** Deterministic object keys (docs/design.md §5): a retry or a second worker writes the same key. */
export const outputObjectKey = (tenantId: string, taskId: string, attemptId: string, ext: string): string =>
  `tenants/${tenantId}/tasks/${taskId}/attempts/${attemptId}/output.${ext}`;
export const thumbnailObjectKey = (tenantId: string, taskId: string, attemptId: string): string =>
  `tenants/${tenantId}/tasks/${taskId}/attempts/${attemptId}/thumbnail.jpg`;
