// The settings reference (docs/configuration.md) is generated from the schema (config/env.ts):
// the committed file is what `npm run docs:config` renders now, and every setting says what it is.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { envSchema } from '../../config/env';
import { CONFIGURATION_DOC, renderConfigurationDoc } from '../../scripts/configuration-doc';

test('every setting in config/env.ts has a description', () => {
  const undescribed = Object.entries(envSchema.shape)
    .filter(([, schema]) => !schema.description?.trim())
    .map(([name]) => name);
  assert.deepEqual(undescribed, [], `wrap each in setting('<what it means>', schema) in config/env.ts: ${undescribed.join(', ')}`);
});

test('docs/configuration.md lists every setting once, with its description', () => {
  const doc = renderConfigurationDoc();
  for (const [name, schema] of Object.entries(envSchema.shape)) {
    const rows = doc.split('\n').filter((line) => line.startsWith(`| \`${name}\` |`));
    assert.equal(rows.length, 1, `${name} has ${rows.length} rows`);
    assert.ok(rows[0]!.endsWith(` ${schema.description?.replace(/\|/g, '\\|')} |`), `${name}'s row carries its description`);
  }
});

test('the committed docs/configuration.md is current (else run `npm run docs:config`)', () => {
  const committed = fs.existsSync(CONFIGURATION_DOC) ? fs.readFileSync(CONFIGURATION_DOC, 'utf8') : '';
  assert.equal(committed, renderConfigurationDoc(), 'docs/configuration.md differs from config/env.ts: run `npm run docs:config` and commit the result');
});
