// domain/backoff.ts pollInterval: the next poll by phase, with jitter, slower while callbacks are healthy.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pollInterval, withDemandFloor, type PollPhase } from '../../domain/backoff';
import { demandFloorMs } from '../../activities/poll-demand';

const pace = { initialMs: 1_000, maxMs: 8_000, healthyFactor: 3 };
const mid = () => 0.5; // no jitter: the factor is exactly 1
const phases: readonly PollPhase[] = ['waiting', 'cancelling', 'reconciling'];

describe('pollInterval', () => {
  test('callbacks not healthy: every phase starts at the initial interval and doubles up to the cap', () => {
    for (const phase of phases) {
      const seq: number[] = [];
      let prev: number | null = null;
      for (let i = 0; i < 6; i++) seq.push((prev = pollInterval(prev, phase, false, pace, mid)));
      assert.deepEqual(seq, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000], phase);
    }
  });

  test('callbacks healthy: a waiting poll starts and caps healthyFactor times later; cancelling and reconciling polls do not', () => {
    const seq: number[] = [];
    let prev: number | null = null;
    for (let i = 0; i < 6; i++) seq.push((prev = pollInterval(prev, 'waiting', true, pace, mid)));
    assert.deepEqual(seq, [3_000, 6_000, 12_000, 24_000, 24_000, 24_000]);
    assert.equal(pollInterval(null, 'cancelling', true, pace, mid), 1_000);
    assert.equal(pollInterval(4_000, 'reconciling', true, pace, mid), 8_000);
  });

  test('when callbacks stop being healthy the next interval drops back under the plain cap at once', () => {
    assert.equal(pollInterval(24_000, 'waiting', false, pace, mid), 8_000);
  });

  test('jitter is ±20 % and never exceeds the cap of the phase', () => {
    assert.equal(
      pollInterval(null, 'waiting', false, pace, () => 0),
      800,
    );
    assert.equal(
      pollInterval(null, 'waiting', false, pace, () => 0.999999),
      1_200,
    );
    assert.equal(
      pollInterval(8_000, 'waiting', false, pace, () => 0.999999),
      8_000,
    );
    assert.equal(
      pollInterval(24_000, 'waiting', true, pace, () => 0.999999),
      24_000,
    );
    for (let i = 0; i < 1_000; i++) {
      const prev = Math.random() < 0.2 ? null : Math.random() * 30_000;
      const healthy = Math.random() < 0.5;
      const phase = phases[i % phases.length]!;
      const ms = pollInterval(prev, phase, healthy, pace, Math.random);
      const cap = phase === 'waiting' && healthy ? 24_000 : 8_000;
      assert.ok(ms >= 1 && ms <= cap, `${ms} for ${phase} healthy=${healthy} prev=${prev}`);
    }
  });

  test('a factor below 1 never makes polls faster', () => {
    assert.equal(pollInterval(null, 'waiting', true, { ...pace, healthyFactor: 0.5 }, mid), 1_000);
  });
});

describe('withDemandFloor and demandFloorMs', () => {
  test('the floor is waiting jobs read in turn at rate × share; none without a quota or without jobs', () => {
    assert.equal(demandFloorMs(10_000, 10, 0.8), 1_250_000);
    assert.equal(demandFloorMs(4, 10, 0.8), 500);
    assert.equal(demandFloorMs(0, 10, 0.8), 0);
    assert.equal(demandFloorMs(500, undefined, 0.8), 0);
  });

  test('an interval under the floor is raised to it, ±10 %; an interval over it is kept as it is', () => {
    assert.equal(
      withDemandFloor(60_000, 1_250_000, () => 0.5),
      1_250_000,
    );
    assert.equal(
      withDemandFloor(60_000, 1_250_000, () => 0),
      1_125_000,
    );
    assert.equal(
      withDemandFloor(60_000, 1_250_000, () => 0.999999),
      1_375_000,
    );
    assert.equal(
      withDemandFloor(60_000, 500, () => 0),
      60_000,
    );
  });
});
