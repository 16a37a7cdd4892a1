// Object storage for rescued outputs. A real S3-compatible server in dev and tests (versitygw),
// any S3 in production.
import type { Readable } from 'node:stream';
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  NotFound,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
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

export interface ObjectStorage {
  readonly bucket: string;
  readonly region: string;
  head(key: string): Promise<StoredObject | null>;
  /** Multipart upload of a stream; resolves when the object is complete. */
  upload(key: string, body: Readable, opts: { contentType: string; onProgress?: (bytes: number) => void }): Promise<void>;
  put(key: string, body: Buffer, opts: { contentType: string; sha256: string }): Promise<void>;
  /** Server-side copy that also sets the object's metadata (publishes a verified object under its final key). */
  publish(fromKey: string, toKey: string, opts: { contentType: string; sha256: string }): Promise<void>;
  delete(key: string): Promise<void>;
  presignGet(key: string, ttlSeconds: number): Promise<string>;
  read(key: string): Promise<Buffer>;
  /** `length` bytes from `offset` (fewer at the end of the object). */
  readRange(key: string, offset: number, length: number): Promise<Buffer>;
  readonly client: S3Client;
}

const isNotFound = (err: unknown): boolean =>
  err instanceof NotFound ||
  (err instanceof S3ServiceException && (err.$metadata.httpStatusCode === 404 || err.name === 'NoSuchKey'));

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
  });
  const bucket = cfg.bucket;
  return {
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
    async upload(key, body, opts) {
      const upload = new Upload({
        client,
        params: { Bucket: bucket, Key: key, Body: body, ContentType: opts.contentType },
        partSize: 8 * 1024 * 1024,
        queueSize: 2,
        leavePartsOnError: false,
      });
      if (opts.onProgress) {
        const report = opts.onProgress;
        upload.on('httpUploadProgress', (p) => report(p.loaded ?? 0));
      }
      await s3Span('Upload', bucket, key, () => upload.done());
    },
    async put(key, body, opts) {
      await s3Span('PutObject', bucket, key, () => client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: body,
          ContentType: opts.contentType,
          Metadata: { sha256: opts.sha256 },
        }),
      ));
    },
    async publish(fromKey, toKey, opts) {
      await s3Span('CopyObject', bucket, toKey, () => client.send(
        new CopyObjectCommand({
          Bucket: bucket,
          Key: toKey,
          CopySource: `${bucket}/${fromKey.split('/').map(encodeURIComponent).join('/')}`,
          MetadataDirective: 'REPLACE',
          ContentType: opts.contentType,
          Metadata: { sha256: opts.sha256 },
        }),
      ));
    },
    async delete(key) {
      await s3Span('DeleteObject', bucket, key, () => client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key })));
    },
    presignGet(key, ttlSeconds) {
      return getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: key }), { expiresIn: ttlSeconds });
    },
    async read(key) {
      const bytes = await s3Span('GetObject', bucket, key, async () => (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }))).Body?.transformToByteArray());
      return Buffer.from(bytes ?? []);
    },
    async readRange(key, offset, length) {
      if (length <= 0) return Buffer.alloc(0);
      const range = `bytes=${offset}-${offset + length - 1}`;
      const bytes = await s3Span('GetObject', bucket, key, async () => (await client.send(new GetObjectCommand({ Bucket: bucket, Key: key, Range: range }))).Body?.transformToByteArray());
      return Buffer.from(bytes ?? []);
    },
  };
}

/** Deterministic object keys (docs/design.md §5): a retry or a second worker writes the same key. */
export const outputObjectKey = (tenantId: string, taskId: string, attemptId: string, ext: string): string =>
  `tenants/${tenantId}/tasks/${taskId}/attempts/${attemptId}/output.${ext}`;
export const thumbnailObjectKey = (tenantId: string, taskId: string, attemptId: string): string =>
  `tenants/${tenantId}/tasks/${taskId}/attempts/${attemptId}/thumbnail.jpg`;
