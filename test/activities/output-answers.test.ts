// How the rescue reads a provider's answer for the output (activities/output-download.ts): media
// types compared case-insensitively, S3's binary/octet-stream taken as opaque like
// application/octet-stream (the media step judges the bytes), a document type still refused; the
// identity encoding asked for, and an answer compressed anyway stored decoded, its size counted
// from the bytes rather than the encoded Content-Length. (Before, the first two were failed
// OUTPUT_LOST at once and a compressed answer failed every retry until the URL expired.)
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { generationTask } from '../../db/schema';
import { outputMovedTo, providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
let server: Server;
let body: Buffer = Buffer.alloc(0);
let answer: { type: string; gzip: 'never' | 'when-asked' | 'always' } = { type: 'video/mp4', gzip: 'never' };
const asked: string[] = [];
before(async () => {
  w = await startActivityWorld({ generationMs: 100 });
  server = createServer((req, res) => {
    const accepts = String(req.headers['accept-encoding'] ?? '');
    asked.push(accepts);
    if (answer.gzip === 'always' || (answer.gzip === 'when-asked' && /gzip/.test(accepts))) {
      const z = gzipSync(body);
      res.writeHead(200, { 'content-type': answer.type, 'content-encoding': 'gzip', 'content-length': String(z.length) }).end(z);
    } else {
      res.writeHead(200, { 'content-type': answer.type, 'content-length': String(body.length) }).end(body);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
});
after(async () => {
  server?.closeAllConnections();
  server?.close();
  await w?.close();
});

/** A task whose provider job succeeded, its output then served by our server as `given`: the task after one rescue, and whether the object stored is the output. */
async function rescuedAs(label: string, given: typeof answer) {
  const id = await providerSucceededTask(w, label);
  const db = w.tdb.database.db;
  const moved = await outputMovedTo(w, id, server);
  body = moved.bytes;
  answer = given;
  await w.run('rescueOutput', id).catch(() => undefined);
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, id));
  const stored = await w.deps.storage.head(moved.key);
  return { task: task!, storedWhole: stored?.sha256 === createHash('sha256').update(body).digest('hex') };
}

for (const type of ['binary/octet-stream', 'Video/MP4', 'VIDEO/mp4; codecs="avc1"']) {
  test(`a valid MP4 served as ${type} is stored and validated`, { timeout: 60_000 }, async () => {
    const { task, storedWhole } = await rescuedAs(`ct-${type}`, { type, gzip: 'never' });
    assert.equal(task.status, 'SUCCEEDED', `${task.status} ${task.failure_code}: ${task.failure_message}`);
    assert.ok(storedWhole);
  });
}

test('an answer that says it is a document is still refused: the output is lost', { timeout: 60_000 }, async () => {
  const { task } = await rescuedAs('ct-html', { type: 'Text/HTML', gzip: 'never' });
  assert.equal(task.status, 'FAILED');
  assert.equal(task.failure_code, 'OUTPUT_LOST');
  assert.match(task.failure_message ?? '', /text\/html is not a video/);
});

test('the rescue asks for the identity encoding, so a CDN that compresses on request sends the bytes as they are', { timeout: 60_000 }, async () => {
  asked.length = 0;
  const { task, storedWhole } = await rescuedAs('gzip-asked', { type: 'video/mp4', gzip: 'when-asked' });
  assert.deepEqual(asked, ['identity']);
  assert.ok(storedWhole, `not stored: ${task.status} ${task.failure_message}`);
  assert.equal(task.status, 'SUCCEEDED');
});

test('an answer compressed anyway is stored decoded, whatever its encoded Content-Length', { timeout: 60_000 }, async () => {
  const { task, storedWhole } = await rescuedAs('gzip-always', { type: 'video/mp4', gzip: 'always' });
  assert.ok(storedWhole, `not stored: ${task.status} ${task.failure_message}`);
  assert.equal(task.status, 'SUCCEEDED');
});
