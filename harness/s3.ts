// An S3-compatible server (versitygw, posix backend) with the project's buckets.
import fs from 'node:fs';
import path from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { waitForHttp } from './ports';
import { extend, launch, tail, type LogFn, type ManagedProcess } from './processes';
import { readToolPaths } from './tools';

export interface S3Process extends ManagedProcess {
  /** http://127.0.0.1:<port>, as S3_ENDPOINT expects it. */
  readonly endpoint: string;
}

export interface S3Options {
  port: number;
  /** Holds <dataDir>/objects (one folder per bucket) and <dataDir>/iam. Created when missing. */
  dataDir: string;
  accessKey: string;
  secretKey: string;
  /** Created after start (existing ones are fine). */
  buckets: string[];
  log?: LogFn;
  /** Default us-east-1. */
  region?: string;
  /** Store object metadata in <dataDir>/meta instead of xattrs. Default: xattrs, falling back to this when they fail. */
  sidecar?: boolean;
  /** Log every request (default false: --quiet). */
  requestLog?: boolean;
  /** Readiness timeout (default 30 s). */
  timeoutMs?: number;
  /** Default: readToolPaths().versitygw. */
  versitygwPath?: string;
}

/**
 * Starts versitygw with the posix backend on 127.0.0.1:<port>, waits for its health endpoint,
 * then creates `buckets` (path-style, region us-east-1).
 */
export async function startS3(opts: S3Options): Promise<S3Process> {
  const versitygwPath = opts.versitygwPath ?? readToolPaths().versitygw;
  const dataDir = path.resolve(opts.dataDir);
  const objects = path.join(dataDir, 'objects');
  const iam = path.join(dataDir, 'iam');
  const meta = path.join(dataDir, 'meta');
  const region = opts.region ?? 'us-east-1';
  const endpoint = `http://127.0.0.1:${opts.port}`;
  const health = '/healthz';

  const attempt = async (sidecar: boolean): Promise<ManagedProcess> => {
    for (const dir of [objects, iam, ...(sidecar ? [meta] : [])]) fs.mkdirSync(dir, { recursive: true });
    const args = ['--port', `127.0.0.1:${opts.port}`, '--region', region, '--health', health, '--iam-dir', iam];
    if (!opts.requestLog) args.push('--quiet');
    args.push('posix');
    if (sidecar) args.push('--sidecar', meta);
    args.push(objects);
    const env = { ...process.env, ROOT_ACCESS_KEY: opts.accessKey, ROOT_SECRET_KEY: opts.secretKey };
    const proc = launch('s3', versitygwPath, args, { env, log: opts.log });
    try {
      await waitForHttp(`${endpoint}${health}`, { timeoutMs: opts.timeoutMs ?? 30_000, process: proc, what: `versitygw on ${endpoint}` });
      return proc;
    } catch (err) {
      await proc.stop('SIGKILL', 2_000);
      throw err;
    }
  };

  let proc: ManagedProcess;
  try {
    proc = await attempt(Boolean(opts.sidecar));
  } catch (err) {
    if (opts.sidecar || !/xattr|extended attribute/i.test(String(err))) throw err;
    proc = await attempt(true);
  }

  const client = new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: { accessKeyId: opts.accessKey, secretAccessKey: opts.secretKey },
  });
  try {
    for (const bucket of opts.buckets) {
      try {
        await client.send(new CreateBucketCommand({ Bucket: bucket }));
      } catch (err) {
        const name = (err as { name?: string }).name;
        if (name !== 'BucketAlreadyOwnedByYou' && name !== 'BucketAlreadyExists') {
          throw new Error(`could not create bucket ${bucket} on ${endpoint}: ${String(err)}${tail(proc)}`);
        }
      }
    }
  } catch (err) {
    await proc.stop('SIGKILL', 2_000);
    throw err;
  } finally {
    client.destroy();
  }
  return extend(proc, { endpoint });
}
