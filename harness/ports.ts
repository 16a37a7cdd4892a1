// Ports and readiness: a free port, whether something listens, and waiting for a condition
// (TCP, HTTP) with the last output of the process being waited on in the error.
import fs from 'node:fs';
import net from 'node:net';
import { describeExit, sleep, tail, type ManagedProcess } from './processes';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago, for a server that starts a little later.
 * Picked at random below the kernel's ephemeral range, not by the OS (port 0): the OS picks from
 * that range, which is also where every outgoing connection's own port comes from, so a port it
 * hands out can be taken by any connection a test opens before its server listens (a suite run
 * lost four tests to EADDRINUSE that way). Below the range only listeners compete, and each is
 * checked. Falls back to the OS's pick where the range leaves no room below it.
 */
export async function freePort(): Promise<number> {
  const [low, high] = belowEphemeral();
  for (let attempt = 0; high > low && attempt < 50; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (await isPortFree(port)) return port;
  }
  return osPickedPort();
}

/** [low, high) under the ephemeral range (net.ipv4.ip_local_port_range), at most 12,000 ports from 10000 up; empty when there is none. */
function belowEphemeral(): [number, number] {
  let ephemeralLow = 32_768;
  try {
    ephemeralLow = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || ephemeralLow;
  } catch {
    // Not Linux: the IANA range starts at 49152, and 32768 is below it too.
  }
  return [Math.max(10_000, ephemeralLow - 12_000), ephemeralLow];
}

function osPickedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('could not determine a free port'))));
    });
  });
}

/** `n` distinct ports, each free a moment ago (for servers started side by side). */
export async function freePorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < n) {
    const port = await freePort();
    if (!ports.includes(port)) ports.push(port);
  }
  return ports;
}

/** True when nothing listens on host:port (we could bind it). */
export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** True when a TCP connection to host:port succeeds within timeoutMs. */
export function canConnect(port: number, host = '127.0.0.1', timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export interface WaitOptions {
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  /** Delay between attempts (default 200 ms). */
  intervalMs?: number;
  /** Stop waiting (and fail) as soon as this process exits. */
  process?: ManagedProcess;
  /** What is being waited for, for the error message. */
  what?: string;
}

/**
 * Calls `check` until it returns true. Fails with a clear error on timeout or when
 * `opts.process` exits first; the error includes that process's last output lines.
 */
export async function waitUntil(check: () => Promise<boolean>, opts: WaitOptions = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const intervalMs = opts.intervalMs ?? 200;
  const what = opts.what ?? 'condition';
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    if (opts.process?.exitInfo) {
      throw new Error(`${opts.process.name} exited (${describeExit(opts.process.exitInfo)}) before ${what}${tail(opts.process)}`);
    }
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}${opts.process ? tail(opts.process) : ''}`);
    }
    await sleep(intervalMs);
  }
}

/** Waits until host:port accepts TCP connections. */
export function waitForTcp(port: number, opts: WaitOptions & { host?: string } = {}): Promise<void> {
  const host = opts.host ?? '127.0.0.1';
  return waitUntil(() => canConnect(port, host), { what: `${host}:${port} to accept connections`, ...opts });
}

/** Waits until GET url answers with `status` (default 200). */
export function waitForHttp(url: string, opts: WaitOptions & { status?: number } = {}): Promise<void> {
  const status = opts.status ?? 200;
  return waitUntil(
    async () => {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return res.status === status;
    },
    { what: `GET ${url} to answer ${status}`, ...opts },
  );
}
