// Lint rules that guard the product's invariants, not style:
// - no floating promises anywhere (a dropped promise is a lost error);
// - workflow code stays inside the sandbox: no Node builtins, no I/O modules, no activity
//   implementations (types only), no wall-clock Date logic.
import tseslint from 'typescript-eslint';

const nodeBuiltins = [
  'assert', 'buffer', 'child_process', 'cluster', 'crypto', 'dgram', 'dns', 'events', 'fs', 'http', 'http2', 'https',
  'net', 'os', 'path', 'perf_hooks', 'process', 'readline', 'stream', 'timers', 'tls', 'url', 'util', 'v8', 'vm',
  'worker_threads', 'zlib',
];

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'db/migrations/**'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.base],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test registers tests through returned promises it awaits itself.
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] },
      ],
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    files: ['workflows/**/*.ts', 'domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            ...nodeBuiltins.flatMap((m) => [
              { name: m, message: 'workflow sandbox: no Node builtins' },
              { name: `node:${m}`, message: 'workflow sandbox: no Node builtins' },
            ]),
            { name: '@temporalio/activity', message: 'workflow sandbox: activities run in the worker, not here' },
            { name: '@temporalio/client', message: 'workflow sandbox: no client calls from workflow code' },
            { name: '@temporalio/worker', message: 'workflow sandbox: no worker APIs in workflow code' },
          ],
          patterns: [
            {
              group: ['../db/*', '../api/*', '../storage/*', '../media/*', '../providers/*', '../observability/*', '../config/*', '../temporal/*', '!../temporal/queues', 'pg', 'drizzle-orm*', 'express', '@aws-sdk/*', 'pino*'],
              message: 'workflow sandbox: no I/O modules (import types with `import type` only)',
              allowTypeImports: true,
            },
            {
              group: ['../activities', '../activities/*'],
              message: 'workflow sandbox: import activity types only (`import type`)',
              allowTypeImports: true,
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: 'workflow code: use workflow time (Date in the sandbox is deterministic, but keep time logic in activities)' },
        { selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']", message: 'workflow code: no wall-clock decisions in the sandbox' },
        { selector: "MemberExpression[object.name='process'][property.name='env']", message: 'workflow code: no environment reads' },
      ],
    },
  },
  {
    files: ['**/*.ts'],
    ignores: ['config/env.ts', 'scripts/**', 'ops/cli.ts', 'harness/**', 'test/**', 'bench/**', 'workflows/**', 'domain/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: "MemberExpression[object.name='process'][property.name='env']", message: 'read configuration through config/env.ts' },
      ],
    },
  },
);
