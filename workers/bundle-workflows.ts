// Builds the workflow bundle and writes it to the file named on the command line. The worker
// runs this as a short-lived child (bundleWorkflowsInChild), so webpack's memory, about 100 MB
// that a long-lived process never gets back, leaves with the child.
import fs from 'node:fs/promises';
import { bundleWorkflows } from './generation-worker';

const [out, flag] = process.argv.slice(2);
if (!out || (flag !== undefined && flag !== '--tracing')) {
  process.stderr.write('usage: bundle-workflows.ts <output file> [--tracing]\n');
  process.exit(2);
}
const { code } = await bundleWorkflows({ tracing: flag === '--tracing' });
await fs.writeFile(out, code);
