// Process state and settings the way the worker builds them (config/services.ts), for tests that
// build activities, a provider guard or a route by hand: every setting comes from testConfig(),
// so its default lives in config/env.ts only.
import { ProviderGuard, type ProviderGuardOptions } from '../../activities/provider-guard';
import { RouteStats } from '../../activities/routing';
import type { TaskActivityDeps } from '../../activities/deps';
import { createTask as createTaskRow } from '../../api/tasks.service';
import { buildActivityDeps, providerGuardSettings, routingSettings } from '../../config/services';
import type { Config } from '../../config/env';
import type { Logger } from '../../observability/logger';
import { eq, sql } from 'drizzle-orm';
import { outboxEvent } from '../../db/schema';
import { testConfig, testLogger } from './stack';

/** buildActivityDeps, logging to the test logger unless told otherwise. */
export function testActivityDeps(
  config: Config,
  parts: Omit<Parameters<typeof buildActivityDeps>[1], 'logger'> & { readonly logger?: Logger },
): TaskActivityDeps {
  return buildActivityDeps(config, { ...parts, logger: parts.logger ?? testLogger });
}

/** A provider guard with the configured ramp and DEGRADED_PROVIDER rate, unless `opts` names them. */
export function testProviderGuard(opts: Omit<ProviderGuardOptions, 'bulkheadRamp' | 'degradedFailureRate'> & Partial<ProviderGuardOptions>): ProviderGuard {
  return new ProviderGuard({ ...providerGuardSettings(testConfig()), ...opts });
}

/** What routeNextAttempt needs besides the task: the configured routing settings and fresh statistics. */
export function testRouting(): { readonly settings: ReturnType<typeof routingSettings>; readonly stats: RouteStats } {
  return { settings: routingSettings(testConfig()), stats: new RouteStats() };
}

let taskDeadlineSeconds: number | undefined;
let webhookMaxOrigins: number | undefined;
/**
 * The API's createTask with the configured default deadline (TASK_DEADLINE_SECONDS) and cap on
 * task-URL origins (WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT), unless the test names them.
 */
export function createTask(
  db: Parameters<typeof createTaskRow>[0],
  token: Parameters<typeof createTaskRow>[1],
  args: Omit<Parameters<typeof createTaskRow>[2], 'defaultDeadlineSeconds'> & { readonly defaultDeadlineSeconds?: number },
): ReturnType<typeof createTaskRow> {
  taskDeadlineSeconds ??= testConfig().TASK_DEADLINE_SECONDS;
  webhookMaxOrigins ??= testConfig().WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT;
  return createTaskRow(db, token, {
    ...args,
    defaultDeadlineSeconds: args.defaultDeadlineSeconds ?? taskDeadlineSeconds,
    webhookMaxOrigins: args.webhookMaxOrigins ?? webhookMaxOrigins,
  });
}

/**
 * A task committed as the API commits one, whose workflow is never started: its outbox row is
 * marked published, so the worker's outbox relay leaves it (only the test moves it).
 */
export async function createTaskWithoutWorkflow(
  db: Parameters<typeof createTaskRow>[0],
  token: Parameters<typeof createTaskRow>[1],
  args: Omit<Parameters<typeof createTaskRow>[2], 'defaultDeadlineSeconds'> & { readonly defaultDeadlineSeconds?: number },
): ReturnType<typeof createTaskRow> {
  const created = await createTask(db, token, args);
  await db
    .update(outboxEvent)
    .set({ published_at: sql`now()` })
    .where(eq(outboxEvent.aggregate_id, created.task.task_id));
  return created;
}
