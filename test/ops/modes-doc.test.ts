// docs/modes.md is the behaviour table operators read; domain/modes.ts is the one the code
// obeys. They must say the same thing, and every row must name a test that exists.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { MODE_POLICIES } from '../../domain/modes';
import { SYSTEM_MODES } from '../../domain/states';
import { REPO_ROOT } from '../../harness';

const doc = fs.readFileSync(path.join(REPO_ROOT, 'docs', 'modes.md'), 'utf8');
const section = doc.slice(doc.indexOf('## Behaviour table'), doc.indexOf('## Automatic narrowing'));
const rows = section
  .split('\n')
  .filter((l) => /^\| [A-Z_]+ \|/.test(l))
  .map((l) =>
    l
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim()),
  );

test('docs/modes.md has exactly one row per system mode, in shedding order', () => {
  assert.deepEqual(
    rows.map((r) => r[0]),
    [...SYSTEM_MODES],
  );
});

test('every row of docs/modes.md matches MODE_POLICIES (create, read, cancel, callback, fact steps, submits, /readyz, webhooks, live events)', () => {
  for (const [mode, create, read, cancel, callback, facts, submits, readyz, webhooks, live] of rows) {
    const p = MODE_POLICIES[mode as keyof typeof MODE_POLICIES];
    const admitted = (cell: string | undefined) => cell === 'yes';
    assert.equal(admitted(create), p.create, `${mode} create`);
    assert.equal(admitted(read), p.read, `${mode} read`);
    assert.equal(admitted(cancel), p.cancel, `${mode} cancel`);
    assert.equal(callback, p.callback, `${mode} callback`);
    assert.equal(facts === 'run', p.factWrites, `${mode} workflow fact steps`);
    assert.equal(submits === 'yes' || submits === 'healthy only', p.submit, `${mode} new provider submits`);
    assert.equal(submits === 'healthy only', p.providers === 'healthy', `${mode} which providers take submits`);
    assert.equal(readyz === '200', p.create, `${mode} /readyz`);
    assert.ok(webhooks === 'send' || webhooks === 'pause', `${mode} webhooks cell is send or pause`);
    assert.equal(webhooks === 'send', p.notify, `${mode} webhooks`);
    assert.equal(live === 'live', p.liveEvents, `${mode} live events`);
    assert.equal(live === '503', !p.read, `${mode} live events refused with reads`);
  }
});

test('each mode row is proved by a test in test/e2e/modes.test.ts named after the mode', () => {
  const suite = fs.readFileSync(path.join(REPO_ROOT, 'test', 'e2e', 'modes.test.ts'), 'utf8');
  for (const mode of SYSTEM_MODES) assert.match(suite, new RegExp(`test\\('${mode}: `), `no test for ${mode}`);
});
