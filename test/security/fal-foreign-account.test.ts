// Attack: fal signs every customer's webhooks with the same keys (one JWKS), so another fal
// customer can sign a "completed" webhook for their own request, with their bytes, and post it
// to our callback URL. Only the signed X-Fal-Webhook-User-Id says whose request it is: a webhook
// for any account but PROVIDER_FAL_USER_ID is refused, nothing is stored, nothing is bound.
import assert from 'node:assert/strict';
import { generateKeyPairSync, sign } from 'node:crypto';
import http, { type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { falSignedMessage } from '../../providers/fal-webhooks';
import { startCallbackWorld, type CallbackWorld } from './support';

// fal's shared signing key, as far as this test is concerned: our JWKS URL serves its public half.
const fal = generateKeyPairSync('ed25519');
let jwks: Server;
let w: CallbackWorld;
before(async () => {
  jwks = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [{ ...fal.publicKey.export({ format: 'jwk' }), kid: 'shared' }] }));
  });
  await new Promise<void>((resolve) => jwks.listen(0, '127.0.0.1', () => resolve()));
  w = await startCallbackWorld({ PROVIDER_FAL_JWKS_URL: `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/.well-known/jwks.json` });
});
after(async () => {
  await w?.close();
  jwks?.close();
});

function falWebhook(userId: string, requestId: string) {
  const body = JSON.stringify({
    request_id: requestId,
    gateway_request_id: requestId,
    status: 'OK',
    payload: { video: { url: 'https://v3.fal.media/files/attacker/their-bytes.mp4' } },
  });
  const ts = String(Math.floor(Date.now() / 1000));
  const signature = sign(null, falSignedMessage(requestId, userId, ts, Buffer.from(body)), fal.privateKey).toString('hex');
  return {
    body,
    headers: { 'x-fal-webhook-request-id': requestId, 'x-fal-webhook-user-id': userId, 'x-fal-webhook-timestamp': ts, 'x-fal-webhook-signature': signature },
  };
}

test("a webhook signed with fal's shared keys for another fal account is refused: 401, nothing stored, the victim's attempt stays unbound", async () => {
  const victim = await w.attempt('fal', { model: 'fal-ai/kling-video/v2/master/text-to-video' });
  const forged = falWebhook('attacker-fal-user', 'attacker-request-1');
  const res = await w.post(`/v1/callbacks/fal/${victim.token}`, forged.body, forged.headers);
  assert.equal(res.status, 401, JSON.stringify(res.body));
  assert.equal(res.headers.get('content-type')?.startsWith('application/problem+json'), true);
  assert.equal(await w.inboxRows(), 0);
  const row = await w.attemptRow(victim.attemptId);
  assert.equal(row.provider_job_id, null);
  assert.equal(row.submit_state, 'SUBMIT_UNKNOWN');

  // The same webhook for our own account goes in: the refusal above is the user id's doing.
  const ours = falWebhook(w.config.PROVIDER_FAL_USER_ID, 'our-request-1');
  const ok = await w.post(`/v1/callbacks/fal/${victim.token}`, ours.body, ours.headers);
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.equal(await w.inboxRows(), 1);
});
