// A storage outage while outputs wait to be rescued: the provider's URL keeps expiring, so the
// task is marked OUTPUT_AT_RISK (NeedsAttention) instead of silently retrying, the rescue keeps
// trying, and once storage is back the output is stored byte for byte and the task succeeds.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { freePort, startS3, type S3Process } from '../../scripts/stack';
import { SA_NEEDS_ATTENTION } from '../../workflows/definitions';
import { startE2E, type E2E } from '../support/e2e';
import { eventually, testConfig } from '../support/stack';

let e: E2E;
let s3: S3Process | null = null;
let s3Port: number;
const dataDir = path.join(os.tmpdir(), `vidorch-s3-outage-${process.pid}`);
const base = testConfig();
const startStorage = () =>
  startS3({
    port: s3Port,
    dataDir,
    accessKey: base.S3_ACCESS_KEY_ID,
    secretKey: base.S3_SECRET_ACCESS_KEY,
    buckets: [base.S3_BUCKET_OUTPUTS],
    log: () => undefined,
  });

before(async () => {
  s3Port = await freePort();
  s3 = await startStorage();
  // Any failed rescue counts as "near the deadline", so the outage shows at once.
  e = await startE2E('s3-outage', { S3_ENDPOINT: s3.endpoint, OUTPUT_AT_RISK_MARGIN_MS: String(24 * 3600 * 1000) });
});
after(async () => {
  await e?.close();
  await s3?.stop();
});

test('storage down during rescue: OUTPUT_AT_RISK with NeedsAttention, then SUCCEEDED with the right bytes when storage returns', async () => {
  await s3!.stop();
  const taskId = await e.createTask('outage-1');
  await e.waitForStatus(taskId, 'OUTPUT_AT_RISK', 60_000);
  const handle = e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId));
  await eventually(async () => ((await handle.describe()).typedSearchAttributes.get(SA_NEEDS_ATTENTION) === true ? true : undefined), 15_000);

  s3 = await startStorage();
  const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
  const bytes = Buffer.from(await (await fetch(task.output.download_url)).arrayBuffer());
  assert.equal(createHash('sha256').update(bytes).digest('hex'), task.output.sha256);
  const path = task.transitions.map((t: { to: string }) => t.to);
  assert.deepEqual(path.slice(path.indexOf('FETCHING_OUTPUT'), path.indexOf('FETCHING_OUTPUT') + 3), ['FETCHING_OUTPUT', 'OUTPUT_AT_RISK', 'PROCESSING_MEDIA']);
  assert.equal((await handle.describe()).typedSearchAttributes.get(SA_NEEDS_ATTENTION), false);
});
