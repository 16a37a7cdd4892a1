// Structured JSON logs (pino). Secrets are redacted by path; callers log ids, never bodies.
import pino, { type Logger } from 'pino';
import { redactText } from './redact';
import { traceFields } from './trace-context';

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

/** pino's error serializer, then observability/redact.ts over its text. */
function errSerializer(err: unknown): unknown {
  if (typeof err === 'string') return redactText(err);
  const out = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  if (!out || typeof out !== 'object') return out;
  for (const k of ['message', 'stack'] as const) if (typeof out[k] === 'string') out[k] = redactText(out[k]);
  return out;
}

/** `stderr`: log there (the ops CLI, whose stdout is its answer); `destination`: log there (tests capture lines). */
export function createLogger(opts: { name: string; level: string; pretty: boolean; stderr?: boolean; destination?: pino.DestinationStream }): Logger {
  const options: pino.LoggerOptions = {
    name: opts.name,
    level: opts.level,
    redact: { paths: REDACT, censor: '[redacted]' },
    serializers: { err: errSerializer, error: errSerializer },
    hooks: {
      // The message text too: callers interpolate errors into it.
      logMethod(args, method) {
        method.apply(this, args.map((a) => (typeof a === 'string' ? redactText(a) : a)) as Parameters<typeof method>);
      },
    },
    base: { service: opts.name, pid: process.pid },
    // The active span's trace_id and span_id (none outside a span, or with tracing off).
    mixin: traceFields,
    timestamp: pino.stdTimeFunctions.isoTime,
    ...(opts.pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname,service' } } } : {}),
  };
  if (opts.destination) return pino(options, opts.destination);
  return opts.stderr && !opts.pretty ? pino(options, pino.destination(2)) : pino(options);
}

/**
 * An error nobody handled (an uncaught exception, an unhandled rejection) is logged with what it
 * was, then the process exits 1: never a silent death, never a process limping on in a state
 * nobody knows. Call once in each process's main.
 */
export function exitOnUnhandledErrors(logger: Logger): void {
  const fatal = (kind: 'uncaught exception' | 'unhandled rejection') => (err: unknown) => {
    logger.fatal({ err, kind }, `${kind}: exiting`);
    logger.flush();
    process.exit(1);
  };
  process.on('uncaughtException', fatal('uncaught exception'));
  process.on('unhandledRejection', fatal('unhandled rejection'));
}
