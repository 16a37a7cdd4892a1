// Attack: while the inbox cannot be written (READ_ONLY, Postgres down) every callback is
// appended to the fallback spool; without a cap a flood fills the disk. Past
// CALLBACK_SPOOL_MAX_BYTES callbacks are refused with 503 + Retry-After (the provider
// redelivers later) and the spool stays under the cap.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { spoolDirFor } from '../../storage/spool-files';
import { setMode } from '../../db/modes';
import { startCallbackWorld, type CallbackWorld } from './support';

const CAP = 2048;
let w: CallbackWorld;
let spoolBase: string;
before(async () => {
  spoolBase = await fs.mkdtemp(path.join(os.tmpdir(), 'spool-cap-'));
  w = await startCallbackWorld({ CALLBACK_SPOOL_DIR: spoolBase, CALLBACK_SPOOL_MAX_BYTES: String(CAP), CALLBACK_RATE_PER_TOKEN_PER_MINUTE: '1000' });
});
after(async () => {
  await w?.close();
  await fs.rm(spoolBase, { recursive: true, force: true });
});

test('in READ_ONLY a callback flood fills the spool to its cap, then gets 503 + Retry-After; the spool stays under the cap', async () => {
  const a = await w.attempt('kling');
  await setMode(w.tdb.database.db, { scope: w.config.FENCE_SCOPE, mode: 'READ_ONLY', actor: 'test', reason: 'spool cap test' });
  const statuses: number[] = [];
  for (let i = 0; i < 40; i += 1) {
    const res = await w.post(`/v1/callbacks/kling/${a.token}`, JSON.stringify({ task_id: `job-${i}` }));
    statuses.push(res.status);
    if (res.status === 503) assert.ok(Number(res.headers.get('retry-after')) >= 1);
  }
  assert.ok(statuses.includes(202), statuses.join(','));
  assert.ok(
    statuses.slice(statuses.indexOf(503)).every((s) => s === 503),
    statuses.join(','),
  );
  const dir = spoolDirFor(spoolBase, w.config.DATABASE_URL);
  let bytes = 0;
  for (const f of await fs.readdir(dir)) bytes += (await fs.stat(path.join(dir, f))).size;
  assert.ok(bytes > 0 && bytes <= CAP, `${bytes} bytes spooled`);
  assert.equal(await w.inboxRows(), 0);
});
