// typescript-eslint's type-checked recommended rules, plus the rules that guard the product's
// invariants:
// - no floating promises anywhere (a dropped promise is a lost error);
// - workflow code stays inside the sandbox: no Node builtins, no I/O modules, no activity
//   implementations (types only), no wall-clock Date logic.
import tseslint from 'typescript-eslint';

const nodeBuiltins = [
  'assert',
  'buffer',
  'child_process',
  'cluster',
  'crypto',
  'dgram',
  'dns',
  'events',
  'fs',
  'http',
  'http2',
  'https',
  'net',
  'os',
  'path',
  'perf_hooks',
  'process',
  'readline',
  'stream',
  'timers',
  'tls',
  'url',
  'util',
  'v8',
  'vm',
  'worker_threads',
  'zlib',
];

// The workflow sandbox's import rule; `extraPatterns` adds a folder's boundary (domain/) to it,
// since a later block's `no-restricted-imports` replaces, not extends, an earlier one's.
const sandboxImports = (extraPatterns = []) => ({
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
        ...extraPatterns,
        {
          group: [
            '../db/*',
            '../api/*',
            '../storage/*',
            '../media/*',
            '../providers/*',
            '../observability/*',
            '../config/*',
            '../temporal/*',
            '!../temporal/queues',
            'pg',
            'drizzle-orm*',
            'express',
            '@aws-sdk/*',
            'pino*',
          ],
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
});

const workflowSyntax = {
  'no-restricted-syntax': [
    'error',
    {
      selector: "NewExpression[callee.name='Date'][arguments.length=0]",
      message: 'workflow code: use workflow time (Date in the sandbox is deterministic, but keep time logic in activities)',
    },
    { selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']", message: 'workflow code: no wall-clock decisions in the sandbox' },
    { selector: "MemberExpression[object.name='process'][property.name='env']", message: 'workflow code: no environment reads' },
  ],
};

// Boundaries (docs STYLE "Boundaries", issue #51): imports run one way — entry points (api, workers,
// ops) → temporal facade → workflows → activities → a subsystem (capacity, storage, providers,
// media, reconcilers) → db → domain. Each folder below lists the folders it may not import; a
// wrong-way import fails `npm run check`. config/ is the composition root (config/services.ts
// builds everything) and is not fenced; test/, bench/, scripts/ and harness/ are not either.
const FOLDERS = [
  'activities',
  'api',
  'bench',
  'config',
  'db',
  'domain',
  'harness',
  'media',
  'net',
  'observability',
  'ops',
  'providers',
  'reconcilers',
  'scripts',
  'storage',
  'temporal',
  'test',
  'workers',
  'workflows',
];
const importsOf = (folder) => [`../${folder}`, `../${folder}/*`, `../../${folder}`, `../../${folder}/*`];
const boundaryPattern = (folder, forbidden) => ({
  group: forbidden.flatMap(importsOf),
  message: `boundary (STYLE.md "Imports run one way"): ${folder}/ may not import ${forbidden.map((f) => `${f}/`).join(', ')}`,
});
// Wrong-way imports that remain, each named by its file pair and why. An entry allows that one file
// to import that one module; nothing else in the folder gets it.
const BOUNDARY_EXCEPTIONS = {
  // The outbox reconciler re-runs the relay's own claim-and-start (relayOnce): moving relayOnce below
  // workers/ means moving the relay loop's claim, lease and facade start with it — not a small move.
  'reconcilers/outbox.ts': ['../workers/outbox-relay'],
  // The thumbnails reconciler retries the thumbnail activity's work (makeThumbnail, failureText),
  // which reads storage, runs ffmpeg and writes the video row: a media/ + db/ split of that activity.
  'reconcilers/thumbnails.ts': ['../activities/thumbnail'],
};
const boundary = (folder, forbidden, extra = {}) => {
  const exceptions = Object.entries(BOUNDARY_EXCEPTIONS).filter(([file]) => file.startsWith(`${folder}/`));
  // A negated entry re-allows one module; its folder's bare entry (`../workers`) is left out, since
  // gitignore-style patterns cannot re-include a file under an excluded folder.
  const rule = (allowed = []) => {
    const { group, message } = boundaryPattern(folder, forbidden);
    const kept = group.filter((g) => !allowed.some((m) => g === m.slice(0, m.lastIndexOf('/'))));
    return { 'no-restricted-imports': ['error', { patterns: [{ group: [...kept, ...allowed.map((m) => `!${m}`)], message }] }] };
  };
  return [
    { files: [`${folder}/**/*.ts`], ignores: exceptions.map(([file]) => file), rules: rule(), ...extra },
    ...exceptions.map(([file, allowed]) => ({ files: [file], rules: rule(allowed) })),
  ];
};
const allBut = (...allowed) => FOLDERS.filter((f) => !allowed.includes(f));

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'db/migrations/**', 'dist/**'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test registers tests through returned promises it awaits itself.
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] },
      ],
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/await-thenable': 'error',
      // Off: objects here are built by factories from closures (no `this`), which the rule cannot tell
      // from `this`-bound methods; all 54 of its findings were closures handed on as callbacks.
      '@typescript-eslint/unbound-method': 'off',
      // Off: an async function without `await` still turns a throw into a rejection, which the callers
      // of promise-returning interfaces (activities, handlers, close hooks) rely on.
      '@typescript-eslint/require-await': 'off',
      // `_` marks a binding a signature needs but the body does not (Express's four-argument error
      // handler); a rest sibling is how an object minus some keys is written.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true }],
      // Passing on a caught error (typed `unknown`) as the rejection keeps it as it was thrown.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
    },
  },
  {
    files: ['test/**/*.ts', 'scripts/record-histories.ts'],
    rules: {
      // Tests (and the script that records histories through their harness) read JSON answers (`res.json()`, `JSON.parse`) as `any` and assert on their fields: a
      // wrong shape fails the assertion, so typing every body would restate the assertions as types.
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  { files: ['workflows/**/*.ts'], rules: { ...sandboxImports(), ...workflowSyntax } },
  // domain/ is pure and imports nothing of ours but domain/.
  { files: ['domain/**/*.ts'], rules: { ...sandboxImports([boundaryPattern('domain', allBut('domain'))]), ...workflowSyntax } },
  // db/ imports domain/ and db/ only (db/migrate.ts, an entry point, loads config/ by a dynamic import).
  ...boundary('db', allBut('db', 'domain')),
  ...boundary('providers', ['activities', 'api', 'ops', 'reconcilers', 'temporal', 'workers', 'workflows']),
  ...boundary('media', ['activities', 'api', 'ops', 'reconcilers', 'temporal', 'workers', 'workflows']),
  ...boundary('storage', ['activities', 'api', 'ops', 'reconcilers', 'temporal', 'workers', 'workflows']),
  ...boundary('net', ['activities', 'api', 'config', 'ops', 'reconcilers', 'temporal', 'workers', 'workflows']),
  ...boundary('observability', ['activities', 'api', 'ops', 'reconcilers', 'workers', 'workflows']),
  ...boundary('reconcilers', ['activities', 'api', 'ops', 'workers']),
  ...boundary('activities', ['api', 'config', 'ops', 'temporal', 'workers', 'workflows']),
  ...boundary('temporal', ['api', 'ops', 'workers']),
  ...boundary('api', ['ops', 'workers']),
  ...boundary('ops', ['workers']),
  ...boundary('workers', ['api', 'ops']),
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
