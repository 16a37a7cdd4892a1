// Provider progress in one shape (domain/progress.ts), from what each provider's API gives:
// Runway's `progress` while RUNNING, Replicate's `logs` while starting or processing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { presentProgress } from '../../api/tasks.present';
import { logTail, PROGRESS_LOG_MAX_CHARS, providerProgress } from '../../domain/progress';
import { predictionToJob, replicatePredictionSchema } from '../../providers/replicate';
import { runwayTaskSchema, runwayTaskToJob } from '../../providers/runway';

test('providerProgress clamps the fraction to 0..1, keeps only a whole non-negative queue position, and is null when nothing was said', () => {
  assert.deepEqual(providerProgress({ fraction: 1.7 }), { fraction: 1, queue_position: null, logs: null });
  assert.deepEqual(providerProgress({ fraction: -0.2, queuePosition: 2 }), { fraction: 0, queue_position: 2, logs: null });
  assert.equal(providerProgress({ fraction: Number.NaN, queuePosition: -1, logs: '  \n' }), null);
  assert.equal(providerProgress({ queuePosition: 1.5 }), null);
});

test('logTail keeps the last PROGRESS_LOG_MAX_CHARS characters, cut at a line start', () => {
  const lines = Array.from({ length: 500 }, (_, i) => `step ${i}`).join('\n');
  const tail = logTail(lines)!;
  assert.ok(tail.length <= PROGRESS_LOG_MAX_CHARS);
  assert.ok(tail.endsWith('step 499'));
  assert.match(tail, /^step \d+\n/);
  assert.equal(logTail('short\n'), 'short');
});

test('Runway: `progress` of a RUNNING task is the fraction; other states carry none', () => {
  const running = runwayTaskToJob(runwayTaskSchema.parse({ id: 't1', status: 'RUNNING', progress: 0.42 }));
  assert.deepEqual(running.progress, { fraction: 0.42, queue_position: null, logs: null });
  assert.equal(runwayTaskToJob(runwayTaskSchema.parse({ id: 't1', status: 'SUCCEEDED', output: ['https://x/y.mp4'] })).progress, null);
});

test('Replicate: `logs` of a processing prediction are its progress; a malformed logs field is ignored, not a failed read', () => {
  const p = predictionToJob(replicatePredictionSchema.parse({ id: 'p1', status: 'processing', logs: 'loading\nstep 1/10\n' }));
  assert.deepEqual(p.progress, { fraction: null, queue_position: null, logs: 'loading\nstep 1/10' });
  const odd = predictionToJob(replicatePredictionSchema.parse({ id: 'p1', status: 'processing', logs: 42 }));
  assert.equal(odd.progress, null);
  assert.equal(predictionToJob(replicatePredictionSchema.parse({ id: 'p1', status: 'succeeded', logs: 'done' })).progress, null);
});

test('logs leave the API with URL queries and credential-like strings redacted (GET /v1/tasks/:id and progress events share presentProgress)', () => {
  const view = presentProgress({
    attemptId: '00000000-0000-4000-8000-000000000001',
    provider: 'replicate',
    providerStatus: 'processing',
    progress: {
      fraction: null,
      queue_position: null,
      logs: 'fetching https://bucket.s3.amazonaws.com/in.png?X-Amz-Signature=abc123&X-Amz-Credential=AKIAABCDEFGHIJKLMNOP\nstep 1/10',
    },
    at: new Date('2026-01-01T00:00:00Z'),
  });
  assert.ok(!/X-Amz|AKIA|abc123/.test(view.logs ?? ''), view.logs ?? '');
  assert.match(view.logs ?? '', /step 1\/10/);
});
