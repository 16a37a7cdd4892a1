// harness/ports.ts: a port for a server that starts a little later comes from below the kernel's
// ephemeral range, where no outgoing connection's own port can take it meanwhile.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import { freePort, freePorts, isPortFree } from '../../harness/ports';

test('freePort picks a free port below the ephemeral range, one a server can then listen on', async () => {
  const ephemeralLow = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  const ports = await freePorts(20);
  assert.equal(new Set(ports).size, 20);
  for (const port of ports) assert.ok(port >= 10_000 && port < ephemeralLow, `${port} is below ${ephemeralLow}`);
  const port = await freePort();
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen({ host: '127.0.0.1', port, exclusive: true }, resolve));
  try {
    assert.equal(await isPortFree(port), false, 'taken once a server listens');
  } finally {
    await new Promise((r) => server.close(r));
  }
});
