// Routes the Temporal SDK's logs (worker, workflow and activity context loggers) into pino,
// so every line carries the SDK's workflowId / activityType metadata as JSON fields.
import type { LogLevel, LogMetadata, Logger as TemporalLogger } from '@temporalio/common';
import type { Logger } from './logger';

const LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

export function temporalLogger(logger: Logger): TemporalLogger {
  const log = (level: LogLevel, message: string, meta?: LogMetadata) => {
    // Poll workers (workers/generation-worker.ts) run activities only, on purpose.
    if (level === 'WARN' && message.startsWith('No workflows registered')) level = 'DEBUG';
    // The SDK reports failures as `error`; pino serialises (message, type, stack) only `err`.
    const fields = meta && 'error' in meta ? { ...meta, err: meta['error'] as unknown, error: undefined } : (meta ?? {});
    logger[LEVELS[level]](fields, message);
  };
  return {
    log,
    trace: (m, meta) => log('TRACE', m, meta),
    debug: (m, meta) => log('DEBUG', m, meta),
    info: (m, meta) => log('INFO', m, meta),
    warn: (m, meta) => log('WARN', m, meta),
    error: (m, meta) => log('ERROR', m, meta),
  };
}
