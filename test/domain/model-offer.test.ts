// What GET /v1/models says of a route (domain/model-offer.ts): the wait estimate and why a route is closed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { findModel } from '../../domain/catalog';
import { entryInputs, estimateWaitSeconds, routeState } from '../../domain/model-offer';

test('the wait for a slot is 0 with one free and nobody waiting, else the rounds ahead times the measured run time', () => {
  assert.equal(estimateWaitSeconds({ waiting: 0, inFlight: 3, slots: 4, medianRunSeconds: null }), 0);
  assert.equal(estimateWaitSeconds({ waiting: 0, inFlight: 4, slots: 4, medianRunSeconds: 30 }), 30);
  // 9 waiting + this one over 4 slots: 3 rounds.
  assert.equal(estimateWaitSeconds({ waiting: 9, inFlight: 4, slots: 4, medianRunSeconds: 20.5 }), 62);
  assert.equal(estimateWaitSeconds({ waiting: 2, inFlight: 4, slots: 4, medianRunSeconds: null }), null);
  assert.equal(estimateWaitSeconds({ waiting: 2, inFlight: 1, slots: null, medianRunSeconds: 10 }), null);
});

test('a route is closed when its provider is not configured, forced open, limited to 0, or disabled, and then has no estimate', () => {
  const base = { waiting: 0, inFlight: 0, slots: 4, medianRunSeconds: 10, configured: true, breakerForce: null } as const;
  assert.deepEqual(routeState(base), { open: true, closedReason: null, waiting: 0, estimatedWaitSeconds: 0 });
  assert.match(routeState({ ...base, configured: false }).closedReason!, /not configured/);
  assert.match(routeState({ ...base, breakerForce: 'open' }).closedReason!, /forced open/);
  assert.match(routeState({ ...base, slots: 0 }).closedReason!, /limit is 0/);
  const disabled = routeState({ ...base, disabledReason: 'removed from the provider catalog' });
  assert.deepEqual(disabled, { open: false, closedReason: 'removed from the provider catalog', waiting: 0, estimatedWaitSeconds: null });
});

test("a family's inputs are what at least one route takes; the image is optional when some route takes one", () => {
  assert.deepEqual(entryInputs(findModel('kling-v2')!), { resolutions: ['720p'], durationsSeconds: [5, 10], imageInput: 'optional', maxPromptChars: 2000 });
  assert.deepEqual(entryInputs(findModel('gen4_turbo')!).imageInput, 'required');
  assert.deepEqual(entryInputs(findModel('gen4.5')!).durationsSeconds, [2, 3, 4, 5, 6, 7, 8, 9, 10]);
});
