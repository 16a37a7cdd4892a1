// `npm run openapi`: writes openapi.json and regenerates the client's types
// (api/client/schema.d.ts) from the route contracts. Commit both.
import fs from 'node:fs/promises';
import path from 'node:path';
import { CONTRACT_FILES, renderContractFiles } from './openapi-files';
import { REPO_ROOT } from '../harness';

const files = await renderContractFiles();
for (const [key, file] of Object.entries(CONTRACT_FILES) as [keyof typeof CONTRACT_FILES, string][]) {
  await fs.mkdir(path.dirname(file), { recursive: true });
  await fs.writeFile(file, files[key]);
  process.stdout.write(`openapi: wrote ${path.relative(REPO_ROOT, file)}\n`);
}
