// The e2e benchmark's work floor (docs/performance.md, "The work floor"): the external work a
// task cannot do without, done by the bare worker with none of the product's bookkeeping. The
// submit is the Replicate adapter's (the documented create call, its webhook pointing at this
// process); the callbacks arrive here, are verified by the adapter's Standard Webhooks check and
// signal the workflow (the output URL with the terminal one); the rescue downloads the output,
// hashes it and stores it with one PutObject and reads its MP4 boxes back from the bucket; then,
// not awaited (as the product's follow-up after SUCCEEDED), its thumbnail is taken with the
// product's frame batcher (the follow-up's batch settings) and stored. No Postgres, no fence, no
// ledger, no inbox, no multipart checkpoint, no publish copy.
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import type { Config } from '../../config/env';
import { buildProviders, buildStorage } from '../../config/services';
import { createFrameBatcher } from '../../media/frame-batches';
import { demuxerOf, probeStored } from '../../media/probe';
import { wakeSignal } from '../../workflows/definitions';
import { providerInput } from '../../activities/provider-input';
import { FOLLOW_UP_FRAMES, THUMBNAIL_AT_SECONDS } from '../../activities/thumbnail';
import { floorOutputSignal } from './bare';

/** The e2e benchmark's task (bench/e2e.ts BODY), as the product sends it to the provider. */
const MODEL = 'minimax/video-01';

export interface FloorWork {
  /** Activities under the real names they stand in for. */
  readonly activities: Record<string, (taskId: string, arg: string) => Promise<{ ok: true }>>;
  /** Callbacks by outcome and thumbnails made, so the benchmark can say what the floor did. */
  readonly counts: Record<string, number>;
  /** Waits for the thumbnails still in the making, then stops the receiver. */
  close(): Promise<void>;
}

/** Starts the callback receiver on loopback and returns the activities that use it. */
export async function startFloorWork(config: Config, client: Client): Promise<FloorWork> {
  const replicate = buildProviders(config)['replicate']!;
  const storage = buildStorage(config);
  const frames = createFrameBatcher(FOLLOW_UP_FRAMES);
  const counts: Record<string, number> = {};
  const count = (k: string) => {
    counts[k] = (counts[k] ?? 0) + 1;
  };
  const following = new Set<Promise<void>>();

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const workflowId = decodeURIComponent((req.url ?? '').split('/').pop() ?? '');
      let verified;
      try {
        verified = replicate.verifyCallback(Buffer.concat(chunks), req.headers);
      } catch {
        count('rejected');
        res.writeHead(401).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      const { job } = verified;
      const signal =
        job.state === 'succeeded' && job.outputUrl
          ? client.workflow.getHandle(workflowId).signal(floorOutputSignal, job.outputUrl)
          : client.workflow.getHandle(workflowId).signal(wakeSignal);
      count(job.state === 'succeeded' ? 'succeeded' : 'other');
      signal.catch(() => count('signal failed'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const hookBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook/`;

  const submitAttempt = async (taskId: string, workflowId: string) => {
    const outcome = await replicate.submit({
      // The workflow's own id for its one submit, as the product's attempt id is.
      attemptId: taskId,
      model: MODEL,
      input: providerInput({ prompt: `floor ${taskId}`, duration_seconds: 6, resolution: '720p' }),
      webhookUrl: hookBase + encodeURIComponent(workflowId),
    });
    if (outcome.kind !== 'accepted') throw new Error(`floor submit ${outcome.kind}: ${'reason' in outcome ? outcome.reason : ''}`);
    return { ok: true as const };
  };

  const rescueOutput = async (taskId: string, outputUrl: string) => {
    const res = await fetch(outputUrl);
    if (!res.ok || !res.body) throw new Error(`floor download: HTTP ${res.status}`);
    const hash = createHash('sha256');
    const parts: Buffer[] = [];
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      parts.push(Buffer.from(chunk));
    }
    const body = Buffer.concat(parts);
    const key = `floor/${taskId}/output.mp4`;
    await storage.put(key, body, { contentType: 'video/mp4', sha256: hash.digest('hex') });
    const url = await storage.presignGet(key, 900);
    const info = await probeStored(storage, key, body.length, url);
    // The thumbnail follows, as the product's does (its follow-up after SUCCEEDED).
    const thumbnail = (async () => {
      const jpeg = await frames({ input: url, atSeconds: Math.min(THUMBNAIL_AT_SECONDS, info.durationSeconds / 2), demuxer: demuxerOf(info.container) });
      await storage.put(`floor/${taskId}/thumbnail.jpg`, jpeg, { contentType: 'image/jpeg', sha256: createHash('sha256').update(jpeg).digest('hex') });
    })().then(
      () => count('thumbnails'),
      () => count('thumbnails failed'),
    );
    following.add(thumbnail);
    void thumbnail.finally(() => following.delete(thumbnail));
    return { ok: true as const };
  };

  return {
    activities: { submitAttempt, rescueOutput },
    counts,
    close: async () => {
      await Promise.allSettled([...following]);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
