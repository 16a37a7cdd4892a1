// A lean HTTP/1.1 sender for webhook load (bench/callbacks.ts): one keep-alive TCP connection
// per load lane, one request in flight on each (no pipelining), each request written as one
// buffer — request line, headers, Content-Length and body — and the answer framed by its
// Content-Length (or chunked). What a provider's webhook sender does; what it leaves out is
// node:http's client machinery (ClientRequest and IncomingMessage streams, the Agent's socket
// bookkeeping, header validation objects), about 70 µs of generator CPU a request on the
// benchmark machine, taken from the 2 cores it shares with the API it measures
// (docs/performance.md "callbacks"). The API still parses every request with node:http.
// Loopback only, like bench/lib/http.ts.
import net from 'node:net';
import { assertLoopback, type HttpResponse } from './http';

export interface KeepAliveSender {
  /** POSTs `body` to `path` with `headers` (names and values without CR or LF); resolves with the answer. */
  post(path: string, headers: Record<string, string>, body: string): Promise<HttpResponse>;
  /** Connections opened since start (a provider reuses them: this stays at the lane count). */
  connectionsOpened(): number;
  close(): void;
}

const HEADER_END = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');
const FORBIDDEN = /[\r\n]/;

interface Pending {
  resolve(r: HttpResponse): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** One keep-alive connection: a request at a time, its answer parsed from the bytes as they come. */
class Connection {
  private buf: Buffer = Buffer.alloc(0);
  private pending: Pending | null = null;
  private head: { status: number; headers: HttpResponse['headers']; length: number | null; chunked: boolean; close: boolean; bodyAt: number } | null = null;
  closed = false;

  constructor(
    readonly socket: net.Socket,
    private readonly onGone: (c: Connection) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      try {
        this.onData(d);
      } catch (e) {
        this.fail(e instanceof Error ? e : new Error(String(e)));
      }
    });
    socket.on('error', (e) => this.fail(e));
    socket.on('close', () => this.fail(new Error('ECONNRESET: the server closed the connection')));
  }

  send(request: string, timeoutMs: number): Promise<HttpResponse> {
    if (this.pending) throw new Error('one request at a time on a connection');
    return new Promise<HttpResponse>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error('timeout')), timeoutMs);
      this.pending = { resolve, reject, timer };
      this.socket.write(request);
    });
  }

  get busy(): boolean {
    return this.pending !== null;
  }

  private fail(e: Error): void {
    if (!this.closed) {
      this.closed = true;
      this.socket.destroy();
      this.onGone(this);
    }
    const p = this.pending;
    this.pending = null;
    if (p) {
      clearTimeout(p.timer);
      p.reject(e);
    }
  }

  private onData(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    if (!this.pending) return this.fail(new Error('bytes from the server with no request outstanding'));
    if (!this.head) {
      const end = this.buf.indexOf(HEADER_END);
      if (end < 0) return;
      this.head = parseHead(this.buf.toString('latin1', 0, end), end + 4);
    }
    const body = this.head.chunked ? dechunk(this.buf, this.head.bodyAt) : whole(this.buf, this.head.bodyAt, this.head.length);
    if (body === undefined) return;
    if (body === null) return this.fail(new Error('an answer with neither Content-Length nor chunked framing'));
    const { status, headers, close } = this.head;
    const p = this.pending;
    this.pending = null;
    this.head = null;
    this.buf = Buffer.alloc(0);
    clearTimeout(p.timer);
    if (close) this.fail(new Error('closed after its answer'));
    p.resolve({ status, headers, body });
  }
}

function parseHead(text: string, bodyAt: number) {
  const lines = text.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
  if (!m) throw new Error(`not an HTTP/1.1 answer: ${JSON.stringify((lines[0] ?? '').slice(0, 40))}`);
  const headers: Record<string, string> = {};
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const cl = headers['content-length'];
  return {
    status: Number(m[1]),
    headers,
    length: cl === undefined ? null : Number(cl),
    chunked: /\bchunked\b/i.test(headers['transfer-encoding'] ?? ''),
    close: /\bclose\b/i.test(headers['connection'] ?? ''),
    bodyAt,
  };
}

/** The body when all of it is here; undefined while bytes are missing; null when unframed. */
function whole(buf: Buffer, at: number, length: number | null): Buffer | null | undefined {
  if (length === null) return null;
  return buf.length >= at + length ? buf.subarray(at, at + length) : undefined;
}

/** The de-chunked body once the last chunk is here (trailers not expected), else undefined. */
function dechunk(buf: Buffer, at: number): Buffer | undefined {
  const parts: Buffer[] = [];
  let i = at;
  for (;;) {
    const eol = buf.indexOf(CRLF, i);
    if (eol < 0) return undefined;
    const size = parseInt(buf.toString('latin1', i, eol).split(';')[0]!, 16);
    if (!Number.isFinite(size)) throw new Error('a malformed chunk size');
    const start = eol + 2;
    if (size === 0) return buf.length >= start + 2 ? Buffer.concat(parts) : undefined;
    if (buf.length < start + size + 2) return undefined;
    parts.push(buf.subarray(start, start + size));
    i = start + size + 2;
  }
}

export function createKeepAliveSender(baseUrl: string, maxConnections: number, opts: { timeoutMs?: number } = {}): KeepAliveSender {
  const base = assertLoopback(baseUrl);
  const host = base.hostname.replace(/^\[|\]$/g, '');
  const port = Number(base.port);
  const hostHeader = base.host;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const idle: Connection[] = [];
  const all = new Set<Connection>();
  let opened = 0;
  let closing = false;

  const gone = (c: Connection) => {
    all.delete(c);
    const i = idle.indexOf(c);
    if (i >= 0) idle.splice(i, 1);
  };

  function connect(): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host, port });
      socket.once('connect', () => {
        socket.removeListener('error', reject);
        opened += 1;
        const c = new Connection(socket, gone);
        all.add(c);
        resolve(c);
      });
      socket.once('error', reject);
    });
  }

  return {
    async post(path, headers, body) {
      if (closing) throw new Error('the sender is closed');
      if (idle.length === 0 && all.size >= maxConnections) throw new Error(`more than ${maxConnections} requests at once`);
      if (/\s/.test(path)) throw new Error('a path with whitespace');
      let head = `POST ${path} HTTP/1.1\r\nHost: ${hostHeader}\r\n`;
      for (const name in headers) {
        const value = headers[name]!;
        if (FORBIDDEN.test(name) || FORBIDDEN.test(value)) throw new Error(`header ${name} holds CR or LF`);
        head += `${name}: ${value}\r\n`;
      }
      const request = `${head}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      const c = idle.pop() ?? (await connect());
      try {
        return await c.send(request, timeoutMs);
      } finally {
        if (!c.closed && !closing) idle.push(c);
      }
    },
    connectionsOpened: () => opened,
    close() {
      closing = true;
      for (const c of all) c.socket.destroy();
      all.clear();
      idle.length = 0;
    },
  };
}
