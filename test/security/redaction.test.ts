// Attack (a leak): ffprobe's error starts with its input, the presigned S3 URL (X-Amz-Signature,
// X-Amz-Credential), and errors become the task's failure, the activity failure in workflow
// history and log lines. A provider output that ffprobe rejects runs the whole product here;
// then an activity failure quoting a presigned URL and a bearer key goes through the real worker.
// Neither the task, the logs nor the history carries the URL's query or the key. A failed
// statement's error carries its parameters in fields of its own (drizzle's `params`): logged by
// the API, a worker or the Temporal SDK, none of them reaches the line.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { sql } from 'drizzle-orm';
import { problemFor } from '../../api/problem';
import { buildStorage } from '../../config/services';
import { createLogger } from '../../observability/logger';
import { startE2E, type E2E } from '../support/e2e';
import { startWorker, tapLogs } from '../support/stack';
import { redactError, redactText } from '../../observability/redact';
import { temporalLogger } from '../../observability/temporal-logger';

let e: E2E;
const logs: string[] = [];
let stopTap: () => void = () => undefined;
let failNextRescue = false;
/** What the wrapped rescue throws once: what execFile's error for ffprobe on a presigned URL looks like. */
let leakyMessage = '';

before(async () => {
  stopTap = tapLogs((line) => logs.push(line));
  e = await startE2E('redaction', {}, { worker: false });
  e.worker = await startWorker(e.config, e.tdb.database, {
    wrapActivities: (a) => ({
      ...a,
      async rescueOutput(taskId: string) {
        if (failNextRescue) {
          failNextRescue = false;
          throw ApplicationFailure.create({ type: 'MediaToolFailed', message: leakyMessage, cause: new Error(`upstream said: ${leakyMessage}`) });
        }
        return a.rescueOutput(taskId);
      },
    }),
  });
});
after(async () => {
  stopTap();
  await e?.close();
});

const SECRETS = /X-Amz-|Signature=|Credential=|r8_[A-Za-z0-9]{8}|whsec_[A-Za-z0-9]/;

async function historyText(taskId: string): Promise<string> {
  return JSON.stringify((await e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId)).fetchHistory()).events ?? []);
}

test('a provider output ffprobe rejects fails the task INVALID_MEDIA without the presigned URL in its failure, the logs or the history', async () => {
  e.sim.sim.setFaults({ output: 'not_media' });
  try {
    const taskId = await e.createTask('redaction-not-media');
    const task = await e.waitForStatus(taskId, 'FAILED');
    assert.equal(task.failure.code, 'INVALID_MEDIA');
    assert.match(task.failure.message, /ffprobe rejected the file/);
    // The URL is still named (scheme, host, path), only its query is gone.
    assert.match(task.failure.message, /http:\/\/127\.0\.0\.1:\d+\//);
    assert.doesNotMatch(task.failure.message, SECRETS);
    assert.doesNotMatch(await historyText(taskId), SECRETS);
    assert.doesNotMatch(logs.join(''), SECRETS);
  } finally {
    e.sim.sim.clearFaults();
  }
});

test('an activity failure quoting a presigned URL and a key reaches history and the worker log redacted', async () => {
  const presigned = await buildStorage(e.config).presignGet('tenants/t/tasks/x/output.mp4', 900);
  assert.match(presigned, /X-Amz-Signature=/);
  leakyMessage = `Command failed: ffprobe -v error -i ${presigned} (Authorization: Bearer r8_abcdefghijklmnop)`;
  failNextRescue = true;
  const taskId = await e.createTask('redaction-activity-failure');
  await e.waitForStatus(taskId, 'SUCCEEDED');
  assert.equal(failNextRescue, false, 'the rescue failed once');
  const history = await historyText(taskId);
  assert.match(history, /Command failed: ffprobe/, 'the failure is in history');
  assert.doesNotMatch(history, SECRETS);
  assert.ok(
    logs.some((l) => l.includes('Command failed: ffprobe')),
    'the failure was logged',
  );
  assert.doesNotMatch(logs.join(''), SECRETS);
});

test("a callback URL's token is masked wherever its path is logged (it authenticates the attempt it names)", () => {
  const token = 'kq3F0a9_bC-xYz0123456789abcdefghijklmnopqrs';
  const text = `unhandled error at /v1/callbacks/replicate/${token} (http://api.example.com/v1/callbacks/kling/${token}?x=1)`;
  const out = redactText(text);
  assert.ok(!out.includes(token), out);
  assert.match(out, /\/v1\/callbacks\/replicate\/\[redacted\]/);
  assert.match(out, /\/v1\/callbacks\/kling\/\[redacted\]/);
});

test("a failed statement's parameters (a signed URL, a prompt) reach no log line, whoever logs it, nor its redacted failure", async () => {
  const lines: string[] = [];
  const logger = createLogger({ name: 'redaction', level: 'info', pretty: false, destination: { write: (l: string) => void lines.push(l) } });
  const signed = 'https://replicate.delivery/xezq/out.mp4?X-Amz-Credential=AKIAEXAMPLE%2F20261202&X-Amz-Signature=deadbeefcafe0123456789';
  const prompt = 'a private prompt 7f3a';
  // A statement that fails (in production a deadlock, a timeout, a dropped connection).
  const failed = () =>
    e.tdb.database.db.execute(sql`SELECT ${signed}::int, ${prompt}::text`).then(
      () => assert.fail('the statement failed'),
      (err: unknown) => err,
    );
  const err = await failed();
  assert.ok(Array.isArray((err as { params?: unknown }).params), 'a DrizzleQueryError, with the parameters in a field');
  logger.warn({ err }, 'step failed');
  assert.equal(problemFor(err, logger, '/v1/tasks').problem.status, 500);
  temporalLogger(logger).warn('Activity failed', { error: err });
  logger.error({ err: new Error('wrapped', { cause: err }) }, 'a cause is redacted too');
  assert.equal(lines.length, 4);
  for (const line of lines) {
    assert.doesNotMatch(line, /deadbeefcafe0123456789|X-Amz-|a private prompt/, line);
    assert.match(line, /Failed query: SELECT \$1::int/, 'the statement is still named');
  }
  assert.match(lines[0]!, /"params":"\[redacted\]"/);
  // What an activity throws is redacted before history (redactActivityFailures): the parameters go too.
  const recorded = redactError(await failed()) as Error;
  assert.doesNotMatch(`${recorded.message}\n${recorded.stack}`, /deadbeefcafe0123456789|a private prompt/);
  assert.match(recorded.message, /params: \[2 redacted\]/);
});
