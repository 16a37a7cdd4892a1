// Worker Versioning (docs/deploy.md, docs/decisions/0073-worker-versioning.md): every Temporal
// worker of a process polls as one Worker Deployment Version, `<WORKER_DEPLOYMENT_NAME>` +
// build id, so a workflow's activities (on the poll and reconcile queues too) run on the build
// that runs the workflow. The behaviour is the worker's default, PINNED, for every workflow type:
// a workflow that declared its own would be refused by an unversioned worker's server (decision 0073).
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WorkerDeploymentOptions } from '@temporalio/worker';

/** Written by `npm run build` beside dist/worker.js (scripts/build.ts). */
export const BUILD_ID_FILE = 'build-id';

/** The build id of this worker code when WORKER_BUILD_ID is unset: the build's, or `dev` from sources. */
export async function builtBuildId(): Promise<string> {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.ts')) return 'dev';
  const file = path.join(path.dirname(here), BUILD_ID_FILE);
  const id = (
    await fs.readFile(file, 'utf8').catch((err: unknown) => {
      throw new Error(`the build has no ${BUILD_ID_FILE} at ${file}: run npm run build, or set WORKER_BUILD_ID`, { cause: err });
    })
  ).trim();
  if (!id) throw new Error(`${file} is empty: run npm run build, or set WORKER_BUILD_ID`);
  return id;
}

export interface VersioningSettings {
  readonly WORKER_VERSIONING: boolean;
  readonly WORKER_DEPLOYMENT_NAME: string;
  readonly WORKER_BUILD_ID?: string | undefined;
}

/** The workers' deployment options, or undefined when versioning is off (unversioned workers). */
export async function workerDeploymentOptions(settings: VersioningSettings): Promise<WorkerDeploymentOptions | undefined> {
  if (!settings.WORKER_VERSIONING) return undefined;
  const buildId = settings.WORKER_BUILD_ID ?? (await builtBuildId());
  return {
    useWorkerVersioning: true,
    version: { deploymentName: settings.WORKER_DEPLOYMENT_NAME, buildId },
    defaultVersioningBehavior: 'PINNED',
  };
}
