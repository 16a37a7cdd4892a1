// What a validated video is charged (activities/process-media.ts chargeFor, docs/billing.md): its
// delivered seconds rounded up with a 1 ms tolerance, at least one, never more than requested or
// reserved.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chargeFor } from '../../activities/process-media';
import { findModel, priceFor } from '../../domain/catalog';
import type { MediaInfo } from '../../media/media-info';

const request = { model: 'minimax/video-01', duration_seconds: 4, resolution: '480p' as const };
const entry = findModel(request.model)!;
const info = (durationSeconds: number): MediaInfo => ({ container: 'mov,mp4,m4a,3gp,3g2,mj2', videoCodec: 'h264', width: 320, height: 240, durationSeconds });
const price = (seconds: number) => priceFor(entry, request.resolution, seconds);
const reserved = price(request.duration_seconds);

test('seconds are rounded up with a 1 ms tolerance, at least one, at most the request', () => {
  assert.equal(chargeFor(request, reserved, info(2.0004)), price(2), 'within the tolerance of 2 s');
  assert.equal(chargeFor(request, reserved, info(2.01)), price(3));
  assert.equal(chargeFor(request, reserved, info(0.0015)), price(1));
  assert.equal(chargeFor(request, reserved, info(0.001)), price(1), 'the shortest valid video (1 ms) is not free');
  assert.equal(chargeFor(request, reserved, info(9.5)), price(4), 'never more than requested');
});
