import assert from 'node:assert/strict';
import { test } from 'node:test';
import { capResetAt, capWaitMs, nextUtcMidnight } from '../../domain/create-cap';

const at = (iso: string) => new Date(iso);

test('a spent daily allowance is asked again at the next UTC midnight, or sooner after the recheck bound', () => {
  assert.equal(nextUtcMidnight(at('2026-12-07T22:10:00Z')).toISOString(), '2026-12-08T00:00:00.000Z');
  assert.equal(nextUtcMidnight(at('2026-12-08T00:00:00Z')).toISOString(), '2026-12-09T00:00:00.000Z');
  assert.equal(capResetAt(at('2026-12-07T23:55:00Z'), null, 900_000).toISOString(), '2026-12-08T00:00:00.000Z');
  assert.equal(capResetAt(at('2026-12-07T10:00:00Z'), null, 900_000).toISOString(), '2026-12-07T10:15:00.000Z');
  // The provider's own Retry-After wins when its answer carries one.
  assert.equal(capResetAt(at('2026-12-07T10:00:00Z'), 60_000, 900_000).toISOString(), '2026-12-07T10:01:00.000Z');
});

test("a capped claim sleeps until the reset, never past the moment a call could still finish by the task's deadline, at least a second", () => {
  const now = at('2026-12-07T10:00:00Z');
  assert.equal(capWaitMs(now, at('2026-12-07T10:15:00Z'), null, 30_000), 900_000);
  assert.equal(capWaitMs(now, at('2026-12-07T10:15:00Z'), at('2026-12-07T10:05:00Z'), 30_000), 270_050);
  assert.equal(capWaitMs(now, at('2026-12-07T09:59:00Z'), null, 30_000), 1_000);
});
