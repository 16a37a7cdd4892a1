// ApiContext.close() closes everything the context owns: a process that built one, used its
// connections and timers, and closed it exits by itself (a missed close once hung a test).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startNodeProcess } from '../../harness';
import { createTestDatabase, testConfig } from '../support/stack';

test('after ApiContext.close() (called twice, one close) nothing the context built keeps the process alive', async () => {
  const tdb = await createTestDatabase(testConfig());
  try {
    const child = startNodeProcess('api-context-close', 'test/fixtures/scripts/api-context-close.ts', {}, { args: [tdb.url] });
    const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), 30_000);
    const exit = await child.exited;
    clearTimeout(timer);
    const output = child.recentOutput().join('\n');
    assert.match(output, /closed listening=false/, output);
    assert.deepEqual(exit, { code: 0, signal: null }, `the process did not exit by itself after close(): ${output}`);
  } finally {
    await tdb.drop();
  }
});
