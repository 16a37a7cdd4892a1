import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runwayModeration, runwayTaskToJob } from '../../providers/runway';

test("Runway's SAFETY.* failure codes are moderation, with the side its documentation names; other failures are not", () => {
  assert.deepEqual(runwayModeration('SAFETY.INPUT.TEXT'), { side: 'input', code: 'SAFETY.INPUT.TEXT' });
  assert.deepEqual(runwayModeration('SAFETY.OUTPUT.VIDEO'), { side: 'output', code: 'SAFETY.OUTPUT.VIDEO' });
  assert.deepEqual(runwayModeration('SAFETY.OTHER'), { side: null, code: 'SAFETY.OTHER' });
  assert.equal(runwayModeration('INTERNAL.BAD_OUTPUT.CODE01'), null);
  assert.equal(runwayModeration(null), null);
  const failed = runwayTaskToJob({ id: 't1', status: 'FAILED', failure: 'refused', failureCode: 'SAFETY.INPUT.IMAGE' });
  assert.deepEqual(failed.moderation, { side: 'input', code: 'SAFETY.INPUT.IMAGE' });
  assert.equal(runwayTaskToJob({ id: 't2', status: 'RUNNING', failureCode: 'SAFETY.INPUT.TEXT' }).moderation, null);
});
