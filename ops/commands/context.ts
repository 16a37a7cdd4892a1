// What every ops command shares: the configuration, the operator's identity, argument parsers,
// output, and scoped connections to Postgres and Temporal.
import os from 'node:os';
import { InvalidArgumentError } from 'commander';
import { temporalConnection } from '../../config/connections';
import { loadConfigOrExit } from '../../config/env';
import type { Client } from '@temporalio/client';
import { buildDatabase, buildProviders } from '../../config/services';
import { toMicros } from '../../domain/money';
import { SYSTEM_MODES, type SystemMode } from '../../domain/states';
import { createLogger, exitOnUnhandledErrors } from '../../observability/logger';
import { lazyClient } from '../../temporal/connection';
import { createGenerationFacade, type GenerationFacade } from '../../temporal/facade';
import { parseDuration } from '../format';

export const config = loadConfigOrExit();
// Its answer is on stdout; what went wrong beyond a command's own error goes to stderr, as JSON.
export const cliLogger = createLogger({ name: 'ops', level: config.LOG_LEVEL, pretty: false, stderr: true });
exitOnUnhandledErrors(cliLogger);
export const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
export const actor = `operator:${config.OPS_OPERATOR ?? os.userInfo().username}`;

export const credits = (value: string): string => {
  try {
    if (toMicros(value) < 0n) throw new Error();
  } catch {
    throw new InvalidArgumentError('a non-negative decimal amount, e.g. 1000 or 12.5');
  }
  return value;
};
export const duration = (value: string): number => {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
};
export const systemMode = (value: string): SystemMode => {
  const m = value.toUpperCase().replace(/-/g, '_');
  if (!(SYSTEM_MODES as readonly string[]).includes(m)) throw new InvalidArgumentError(`one of ${SYSTEM_MODES.join(', ')}`);
  return m as SystemMode;
};
/** The providers this deployment's workers can call, with their adapters' in-flight limits. */
export const adapterLimits = Object.fromEntries(Object.entries(buildProviders(config)).map(([name, a]) => [name, a.capabilities.maxConcurrency ?? null]));
export const providerName = (value: string): string => {
  if (!(value in adapterLimits)) throw new InvalidArgumentError(`one of ${Object.keys(adapterLimits).join(', ')}`);
  return value;
};
export const inFlightLimit = (value: string): number | null => {
  if (value === 'none') return null;
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("a number of jobs (0 or more), or none for the adapter's limit");
  return Number(value);
};
export const print = (json: boolean, data: unknown, text: () => string) => console.log(json ? JSON.stringify(data) : text());

export async function withDb<T>(work: (db: ReturnType<typeof buildDatabase>) => Promise<T>): Promise<T> {
  const database = buildDatabase(config, 'vidorch-ops');
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

export async function withClient<T>(work: (client: Client) => Promise<T>): Promise<T> {
  const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE });
  try {
    return await work(await temporal.get());
  } finally {
    await temporal.close();
  }
}

export async function withTemporal<T>(work: (facade: GenerationFacade) => Promise<T>): Promise<T> {
  const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE });
  try {
    return await work(createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE, { taskPriority: config.TEMPORAL_TASK_PRIORITY }));
  } finally {
    await temporal.close();
  }
}
