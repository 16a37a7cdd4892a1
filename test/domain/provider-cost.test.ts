// The cost of a finished provider job (domain/provider-cost.ts): reported where the provider says
// it, computed only from a published price, unknown otherwise, never a guess.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { providerCost, UNKNOWN_COST } from '../../domain/provider-cost';

const job = { provider: 'runway', model: 'gen4.5', state: 'succeeded' as const, metrics: null, requestedSeconds: 5 };

describe('provider cost of a finished job', () => {
  test("Runway: the task's cost.credits, reported, 0 included (a refunded task)", () => {
    assert.deepEqual(providerCost({ ...job, metrics: { cost_credits: 60 } }), { amount: '60.000000', unit: 'runway_credit', source: 'reported' });
    assert.deepEqual(providerCost({ ...job, state: 'failed', metrics: { cost_credits: 0 } }), {
      amount: '0.000000',
      unit: 'runway_credit',
      source: 'reported',
    });
  });

  test('Runway without a cost on the task: unknown, not zero', () => {
    assert.deepEqual(providerCost({ ...job, metrics: { progress: 1 } }), UNKNOWN_COST);
    assert.deepEqual(providerCost({ ...job, metrics: { cost_credits: -1 } }), UNKNOWN_COST);
  });

  test('a published price per output second: computed for a success, unknown for a failure', () => {
    const fal = { ...job, provider: 'fal', model: 'fal-ai/kling-video/v2/master/text-to-video' };
    assert.deepEqual(providerCost(fal), { amount: '1.400000', unit: 'USD', source: 'computed' });
    assert.deepEqual(providerCost({ ...fal, requestedSeconds: 10 }), { amount: '2.800000', unit: 'USD', source: 'computed' });
    assert.deepEqual(providerCost({ ...fal, state: 'failed' }), UNKNOWN_COST);
  });

  test('a model with no published figure: unknown, whatever the job reports', () => {
    assert.deepEqual(providerCost({ ...job, provider: 'replicate', model: 'minimax/video-01', metrics: { predict_time: 42 } }), UNKNOWN_COST);
    assert.deepEqual(providerCost({ ...job, provider: 'kling', model: 'kling-v2-master' }), UNKNOWN_COST);
  });
});
