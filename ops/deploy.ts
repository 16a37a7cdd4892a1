// `npm run ops -- deploy …`: a rolling deploy of a new worker build through Worker Versioning
// (docs/deploy.md, docs/decisions/0073-worker-versioning.md). The Worker Deployment's versions,
// which one is current and which ramping, how many open tasks each still holds; ramp a new build,
// make it current, or make the previous one current again (a rollback). Each change names the operator as its identity.
import type { Client } from '@temporalio/client';
import { Command, InvalidArgumentError } from 'commander';
import { table } from './format';

export interface DeploymentVersion {
  readonly buildId: string;
  /** inactive, ramping, current, draining, drained (the server's WorkerDeploymentVersionStatus). */
  readonly status: string;
  /** Workflows still running on this version (visibility; a second or so behind). */
  readonly running: number;
  readonly createdAt: string | null;
}

export interface DeploymentState {
  readonly deploymentName: string;
  readonly current: string | null;
  readonly ramping: string | null;
  readonly rampingPercent: number;
  readonly versions: readonly DeploymentVersion[];
}

/** The server's enum name in lower case without its prefix (WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT → current). */
function enumName(value: number | null | undefined, names: Record<number, string>, prefix: string): string {
  return (names[Number(value ?? 0)] ?? 'unspecified').replace(prefix, '').toLowerCase();
}

const STATUS_NAMES: Record<number, string> = {
  0: 'WORKER_DEPLOYMENT_VERSION_STATUS_UNSPECIFIED',
  1: 'WORKER_DEPLOYMENT_VERSION_STATUS_INACTIVE',
  2: 'WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT',
  3: 'WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING',
  4: 'WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING',
  5: 'WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED',
};

/** Visibility's name for a version in `TemporalWorkerDeploymentVersion` (server 1.28+: `<name>:<build id>`). */
export const versionKey = (deploymentName: string, buildId: string) => `${deploymentName}:${buildId}`;

/** Workflows running on one version, by visibility (every type: generation and reconcile). */
export async function runningOn(client: Client, deploymentName: string, buildId: string): Promise<number> {
  const query = `TemporalWorkerDeploymentVersion = '${versionKey(deploymentName, buildId)}' AND ExecutionStatus = 'Running'`;
  const { count } = await client.workflow.count(query);
  return count;
}

/** The deployment as the server describes it, or null when no worker of it has polled yet. */
export async function describeDeployment(client: Client, namespace: string, deploymentName: string): Promise<DeploymentState | null> {
  let info;
  try {
    info = (await client.workflowService.describeWorkerDeployment({ namespace, deploymentName })).workerDeploymentInfo;
  } catch (err) {
    if ((err as { code?: number }).code === 5) return null; // NOT_FOUND
    throw err;
  }
  const routing = info?.routingConfig;
  const versions = await Promise.all(
    (info?.versionSummaries ?? []).map(async (v): Promise<DeploymentVersion> => {
      const buildId = v.deploymentVersion?.buildId ?? '';
      const created = v.createTime?.seconds ? new Date(Number(v.createTime.seconds) * 1000).toISOString() : null;
      return {
        buildId,
        status: enumName(v.status, STATUS_NAMES, 'WORKER_DEPLOYMENT_VERSION_STATUS_'),
        running: await runningOn(client, deploymentName, buildId),
        createdAt: created,
      };
    }),
  );
  return {
    deploymentName,
    current: routing?.currentDeploymentVersion?.buildId || null,
    ramping: routing?.rampingDeploymentVersion?.buildId || null,
    rampingPercent: routing?.rampingVersionPercentage ?? 0,
    versions: versions.sort((a, b) => (a.createdAt ?? '').localeCompare(b.createdAt ?? '')),
  };
}

export interface DeployTarget {
  readonly client: Client;
  readonly namespace: string;
  readonly deploymentName: string;
  /** Recorded by the server as who made the change. */
  readonly identity: string;
}

/** Makes `buildId` the current version: new workflows start on it (and any ramp ends). Its workers must be polling. */
export async function setCurrentVersion(t: DeployTarget, buildId: string): Promise<{ previous: string | null }> {
  const res = await t.client.workflowService.setWorkerDeploymentCurrentVersion({
    namespace: t.namespace,
    deploymentName: t.deploymentName,
    buildId,
    identity: t.identity,
  });
  return { previous: res.previousDeploymentVersion?.buildId || null };
}

/** Sends `percent` of new workflows to `buildId` (0 with no build id: no ramp). Its workers must be polling. */
export async function setRampingVersion(t: DeployTarget, buildId: string | null, percent: number): Promise<void> {
  await t.client.workflowService.setWorkerDeploymentRampingVersion({
    namespace: t.namespace,
    deploymentName: t.deploymentName,
    buildId: buildId ?? '',
    percentage: buildId ? percent : 0,
    identity: t.identity,
  });
}

const percent = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 100) throw new InvalidArgumentError('a percentage, 0 to 100');
  return n;
};

function printState(s: DeploymentState | null, deploymentName: string): string {
  if (!s) return `deployment ${deploymentName}: no worker of it has polled yet (is WORKER_VERSIONING on?)`;
  const ramp = s.ramping ? `${s.ramping} at ${s.rampingPercent}%` : 'none';
  return [
    `deployment ${s.deploymentName}: current ${s.current ?? 'none (new workflows go to unversioned workers)'}, ramping ${ramp}`,
    table(
      s.versions.map((v) => ({ build_id: v.buildId, status: v.status, running: v.running, first_polled: v.createdAt ?? '' })),
      ['build_id', 'status', 'running', 'first_polled'],
    ),
  ].join('\n');
}

/** `ops deploy status|ramp|set-current` on the CLI's program. */
export function registerDeployCommands(
  program: Command,
  ctx: {
    withClient: <T>(work: (client: Client) => Promise<T>) => Promise<T>;
    namespace: string;
    deploymentName: string;
    actor: string;
    print: (json: boolean, data: unknown, text: () => string) => void;
  },
): void {
  const deploy = program
    .command('deploy')
    .description(`rolling deploys through Worker Versioning: deployment ${ctx.deploymentName} (WORKER_DEPLOYMENT_NAME), docs/deploy.md`);
  const target = (client: Client): DeployTarget => ({ client, namespace: ctx.namespace, deploymentName: ctx.deploymentName, identity: ctx.actor });

  deploy
    .command('status')
    .description('versions of the deployment: current, ramping, draining or drained, and the workflows still running on each')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const state = await ctx.withClient((c) => describeDeployment(c, ctx.namespace, ctx.deploymentName));
      ctx.print(o.json, state, () => printState(state, ctx.deploymentName));
    });

  deploy
    .command('ramp')
    .description('send a share of new tasks to a build whose workers poll (running tasks stay where they are); --percent 0 stops the ramp')
    .argument('[build-id]', 'the new build (its workers must be polling)')
    .requiredOption('--percent <n>', 'share of new workflows, 0 to 100', percent)
    .option('--json', 'print one JSON line', false)
    .action(async (buildId: string | undefined, o: { percent: number; json: boolean }) => {
      if (!buildId && o.percent !== 0) throw new InvalidArgumentError('a build id, or --percent 0 to stop the ramp');
      const state = await ctx.withClient(async (c) => {
        await setRampingVersion(target(c), buildId ?? null, o.percent);
        return describeDeployment(c, ctx.namespace, ctx.deploymentName);
      });
      ctx.print(o.json, state, () => printState(state, ctx.deploymentName));
    });

  deploy
    .command('set-current')
    .description('make a build current: new tasks start on it (a ramp ends); running tasks finish where they started. Rollback: the previous build')
    .argument('<build-id>', 'the build to make current (its workers must be polling)')
    .option('--json', 'print one JSON line', false)
    .action(async (buildId: string, o: { json: boolean }) => {
      const out = await ctx.withClient(async (c) => {
        const { previous } = await setCurrentVersion(target(c), buildId);
        return { previous, state: await describeDeployment(c, ctx.namespace, ctx.deploymentName) };
      });
      ctx.print(o.json, out, () => `current ${buildId} (was ${out.previous ?? 'none'})\n${printState(out.state, ctx.deploymentName)}`);
    });
}
