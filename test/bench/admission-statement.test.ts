// The admission benchmark's baselines send the create statement of db/task-admission.ts as the API
// does (docs/performance.md "The create transaction"): the pgbench scripts carry its list of the
// modes that admit creates as a literal, which must be the policy table's (domain/modes.ts).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { CREATE_MODES } from '../../db/task-admission';

const SQL_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'sql');

test('the pgbench create statements admit creates in exactly the modes the policy table admits them', () => {
  for (const file of ['admission-tx.sql', 'admission-full.sql']) {
    const text = fs.readFileSync(path.join(SQL_DIR, file), 'utf8');
    const lists = [...text.matchAll(/fence\.mode = ANY \('\{([A-Z_,]+)\}'::text\[\]\)/g)].map((m) => m[1]!.split(','));
    assert.equal(lists.length, 1, `${file}: one mode list in the task insert`);
    assert.deepEqual(lists[0], [...CREATE_MODES], file);
  }
});
