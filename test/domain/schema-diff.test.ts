// The schema diff `ops catalog sync` prints: every kind of change between two revisions of a
// model's published input schema, with Cog's allOf-wrapped enums and $refs resolved.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { diffInputSchemas, inlineRefs } from '../../domain/schema-diff';

const before = {
  type: 'object',
  required: ['prompt'],
  properties: {
    prompt: { type: 'string' },
    mode: { allOf: [{ $ref: '#/definitions/mode' }], default: 'standard' },
    duration: { type: 'integer', enum: [5, 10], default: 5 },
    cfg: { type: 'number', minimum: 0, maximum: 1 },
    gone: { type: 'string' },
  },
  definitions: { mode: { type: 'string', enum: ['standard', 'pro'] } },
};

test('no change: no lines', () => {
  assert.deepEqual(diffInputSchemas(before, structuredClone(before)), []);
});

test('each kind of change is named by its input: added, removed, required, type, enum values, range, default', () => {
  const after = {
    type: 'object',
    required: ['prompt', 'start_image', 'cfg'],
    properties: {
      prompt: { type: 'string' },
      mode: { allOf: [{ $ref: '#/definitions/mode' }], default: 'pro' },
      duration: { type: 'string', enum: ['5', '9'] },
      cfg: { type: 'number', minimum: 0, maximum: 2 },
      start_image: { type: 'string', format: 'uri' },
    },
    definitions: { mode: { type: 'string', enum: ['standard', 'pro', 'master'] } },
  };
  assert.deepEqual(diffInputSchemas(before, after), [
    { path: 'input.cfg', kind: 'required-added', detail: 'now required' },
    { path: 'input.cfg', kind: 'range', detail: 'maximum 1 → 2' },
    { path: 'input.duration', kind: 'type', detail: 'integer → string' },
    { path: 'input.duration', kind: 'enum-added', detail: 'now also "5", "9"' },
    { path: 'input.duration', kind: 'enum-removed', detail: 'no longer 5, 10' },
    { path: 'input.duration', kind: 'default', detail: 'default 5 → (none)' },
    { path: 'input.gone', kind: 'input-removed', detail: 'was optional string' },
    { path: 'input.mode', kind: 'enum-added', detail: 'now also "master"' },
    { path: 'input.mode', kind: 'default', detail: 'default "standard" → "pro"' },
    { path: 'input.start_image', kind: 'input-added', detail: 'required string (uri)' },
  ]);
});

test('nothing recorded yet: every input is new', () => {
  assert.deepEqual(diffInputSchemas(null, { type: 'object', required: ['prompt'], properties: { prompt: { type: 'string' } } }), [
    { path: 'input.prompt', kind: 'input-added', detail: 'required string' },
  ]);
});

test("an OpenAPI document's component $refs are inlined; an unknown one is an error, never a silent gap", () => {
  const components = { Mode: { type: 'string', enum: ['std'] }, Input: { type: 'object', properties: { mode: { $ref: '#/components/schemas/Mode' } } } };
  assert.deepEqual(inlineRefs(components.Input, components), { type: 'object', properties: { mode: { type: 'string', enum: ['std'] } } });
  assert.throws(() => inlineRefs({ $ref: '#/components/schemas/Nope' }, components), /unresolved \$ref/);
  // A schema's own definitions are left for the validator unless the root is given.
  assert.deepEqual(inlineRefs({ $ref: '#/definitions/x' }, {}), { $ref: '#/definitions/x' });
});
