// Real (tiny) MP4 outputs made with ffmpeg, cached in dataDir, one per duration 1..10 s,
// and the signed, expiring URLs the simulator hands out for them.
import { execFile } from 'node:child_process';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, stat, unlink } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import path from 'node:path';
import type { NextFunction, Response } from 'express';

export const MIN_DURATION_S = 1;
export const MAX_DURATION_S = 10;
export const DEFAULT_DURATION_S = 2;

/** input.duration → whole seconds in 1..10 (default 2). */
export function clampDuration(v: unknown): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
  if (!Number.isFinite(n)) return DEFAULT_DURATION_S;
  return Math.min(MAX_DURATION_S, Math.max(MIN_DURATION_S, Math.round(n)));
}

function run(cmd: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: 60_000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`${cmd} failed: ${err.message}\n${String(stderr).slice(-2000)}`));
      else resolve();
    });
  });
}

export class MediaLibrary {
  private readonly pending = new Map<string, Promise<string>>();

  /** `padBytes`: how much larger output files are served (fault knob output_pad_bytes). */
  constructor(
    private readonly dataDir: string,
    private readonly ffmpegPath = 'ffmpeg',
    private readonly padBytes: () => number = () => 0,
  ) {}

  /** Path of the sample for this duration (padded per padBytes), made once (concurrent callers share the work). */
  sample(durationS: number): Promise<string> {
    const d = clampDuration(durationS);
    const pad = this.padBytes();
    return pad > 0
      ? this.once(`${d}+${pad}`, async () => this.pad(await this.once(String(d), () => this.generate(d)), pad))
      : this.once(String(d), () => this.generate(d));
  }

  private once(key: string, make: () => Promise<string>): Promise<string> {
    let p = this.pending.get(key);
    if (!p) {
      p = make();
      this.pending.set(key, p);
      p.catch(() => this.pending.delete(key));
    }
    return p;
  }

  /** The sample followed by a top-level 'free' box whose payload is `pad - 8` zero bytes. */
  private async pad(file: string, pad: number): Promise<string> {
    const out = file.replace(/\.mp4$/, `-pad${pad}.mp4`);
    try {
      if ((await stat(out)).size > 0) return out;
    } catch {
      // not made yet
    }
    const tmp = `${out}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    const header = Buffer.alloc(8);
    header.writeUInt32BE(Math.max(8, pad), 0);
    header.write('free', 4, 'latin1');
    async function* bytes() {
      yield* createReadStream(file);
      yield header;
      const zeros = Buffer.alloc(64 * 1024);
      for (let left = Math.max(0, pad - 8); left > 0; left -= zeros.length) yield left >= zeros.length ? zeros : zeros.subarray(0, left);
    }
    await pipeline(bytes(), createWriteStream(tmp));
    await rename(tmp, out);
    return out;
  }

  private async generate(d: number): Promise<string> {
    const dir = path.join(this.dataDir, 'samples');
    const file = path.join(dir, `testsrc-${d}s.mp4`);
    try {
      const s = await stat(file);
      if (s.size > 0) return file;
    } catch {
      // not cached yet
    }
    await mkdir(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp.mp4`;
    try {
      await run(this.ffmpegPath, [
        '-hide_banner',
        '-loglevel',
        'error',
        '-y',
        '-f',
        'lavfi',
        '-i',
        `testsrc=size=320x240:rate=24:duration=${d}`,
        '-pix_fmt',
        'yuv420p',
        '-c:v',
        'libx264',
        '-preset',
        'ultrafast',
        '-movflags',
        '+faststart',
        '-f',
        'mp4',
        tmp,
      ]);
      await rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
    return file;
  }
}

/** HMAC-signed, expiring file URLs (`?expires=<ms>&sig=<hmac>`). */
export class UrlSigner {
  private readonly key = randomBytes(32);

  private mac(predictionId: string, expires: number): Buffer {
    return createHmac('sha256', this.key).update(`${predictionId}:${expires}`).digest();
  }

  sign(predictionId: string, expires: number): string {
    return this.mac(predictionId, expires).toString('base64url');
  }

  /** 'ok', or why the URL is refused. */
  check(predictionId: string, expiresRaw: unknown, sigRaw: unknown, now = Date.now()): 'ok' | 'bad-signature' | 'expired' {
    if (typeof expiresRaw !== 'string' || typeof sigRaw !== 'string' || !/^\d+$/.test(expiresRaw)) return 'bad-signature';
    const expires = Number(expiresRaw);
    const given = Buffer.from(sigRaw, 'base64url');
    const want = this.mac(predictionId, expires);
    if (given.length !== want.length || !timingSafeEqual(given, want)) return 'bad-signature';
    return now >= expires ? 'expired' : 'ok';
  }
}

/** Set by the simulator's output middleware when this read draws the 'reset_mid_body' fault. */
export const CUT_OUTPUT = 'cutOutput';

/**
 * Sends an output file: express's send handles Content-Length, ETag, HEAD and single/multi Range
 * (206/416). A read marked CUT_OUTPUT gets a 200 with the full Content-Length and about half of
 * the bytes, then a connection reset (fault 'reset_mid_body', docs/providers.md).
 */
export async function sendOutputFile(res: Response, next: NextFunction, file: string): Promise<void> {
  if (res.locals[CUT_OUTPUT] === true) {
    const [bytes, info] = await Promise.all([readFile(file), stat(file)]);
    // The validators a CDN sends on every answer, as the full answer below does (send's weak ETag).
    res.status(200).set({
      'Content-Type': 'video/mp4',
      'Content-Length': String(bytes.length),
      ETag: `W/"${info.size.toString(16)}-${info.mtime.getTime().toString(16)}"`,
      'Last-Modified': info.mtime.toUTCString(),
    });
    res.write(bytes.subarray(0, Math.floor(bytes.length / 2)), () => res.socket?.resetAndDestroy());
    return;
  }
  res.sendFile(file, { headers: { 'Content-Type': 'video/mp4' }, cacheControl: false, dotfiles: 'allow' }, (err) => {
    if (err && !res.headersSent) next(err);
  });
}
