// Structured JSON logs (pino). Secrets are redacted by path; callers log ids, never bodies.
import pino, { type Logger } from 'pino';
import { redactErrorText, redactText, statementParamTexts } from './redact';
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

/** Fields whose value is a failed statement's parameters (drizzle's DrizzleQueryError.params): dropped. */
const STATEMENT_PARAMS = new Set(['params', 'parameters']);

/**
 * pino's error serializer, then observability/redact.ts over every field it kept: pino copies an
 * error's own fields as they are (a DrizzleQueryError's `params`, a pg error's `detail` quoting a
 * value, an SDK error's details), so each string anywhere in it is redacted, statement parameters
 * are dropped (and cut from the messages that quote them), and the result is a copy (the error
 * itself is left as it was).
 */
function errSerializer(err: unknown): unknown {
  if (typeof err === 'string') return redactText(err);
  const params = statementParamTexts(err);
  return redactFields(pino.stdSerializers.err(err as Error), params, 0, new Set());
}

function redactFields(value: unknown, params: readonly [string, string][], depth: number, seen: Set<unknown>): unknown {
  if (typeof value === 'string') return redactErrorText(value, params);
  if (value === null || typeof value !== 'object' || value instanceof Date) return value;
  if (ArrayBuffer.isView(value)) return `[${value.byteLength} bytes]`;
  if (seen.has(value)) return '[circular]';
  if (depth >= 6) return '[…]';
  seen.add(value);
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return redactFields(toJSON.call(value), params, depth + 1, seen);
  if (Array.isArray(value)) return value.map((v) => redactFields(v, params, depth + 1, seen));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = STATEMENT_PARAMS.has(k) ? '[redacted]' : redactFields(v, params, depth + 1, seen);
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
