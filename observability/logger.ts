// Structured JSON logs (pino). Secrets are redacted by path; callers log ids, never bodies.
import pino, { type Logger } from 'pino';

export type { Logger };

const REDACT = [
  'req.headers.authorization',
  'headers.authorization',
  'authorization',
  'apiKey',
  'api_key',
  'token',
  'secret',
  '*.secret',
  '*.apiToken',
  '*.password',
];

export function createLogger(opts: { name: string; level: string; pretty: boolean }): Logger {
  return pino({
    name: opts.name,
    level: opts.level,
    redact: { paths: REDACT, censor: '[redacted]' },
    base: { service: opts.name, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(opts.pretty
      ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname,service' } } }
      : {}),
  });
}
