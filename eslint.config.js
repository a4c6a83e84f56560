// @ts-check
/**
 * ESLint, type-aware (typescript-eslint's recommended-type-checked), over src/, test/ and bench/.
 * Formatting is Prettier's alone (`npm run lint` runs both). Rules turned off carry their reason.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // web/: the browser's code, type-checked by its own web/tsconfig.json (npm run typecheck).
  {
    ignores: [
      'dist/**',
      'clients/typescript/dist/**',
      'node_modules/**',
      'coverage/**',
      '.runguard/**',
      'web/**',
      'test-artifacts/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: './tsconfig.eslint.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Unused names are errors, but `_`-prefixed ones are deliberate (a handler's unused argument).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      // Template literals here build log lines and SQL from numbers and ids on purpose.
      '@typescript-eslint/restrict-template-expressions': 'off',
      // Fastify's hooks and route handlers are async by contract, with or without an await.
      '@typescript-eslint/require-await': 'off',
      // `void promise` marks a deliberate fire-and-forget; a forgotten await is still an error.
      '@typescript-eslint/no-floating-promises': ['error', { ignoreVoid: true }],
    },
  },
  {
    // The rule engine is pure: no storage, HTTP, proxy or use case (CONTRIBUTING.md, "How the code is
    // laid out"). The contract is data.
    files: ['src/rules/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/store/**',
                '**/api/**',
                '**/proxy/**',
                '**/guard/**',
                '**/admin/**',
                '**/jobs/**',
                '**/daemon/**',
                '**/webhooks/**',
                'pg',
                'ioredis',
                'fastify',
                'undici',
                'node:*',
              ],
              message: 'src/rules/ is pure: it imports nothing from storage, HTTP, the proxy or the use cases.',
            },
          ],
        },
      ],
    },
  },
  {
    // Routes stay thin (CONTRIBUTING.md): a route parses, asks a use case, and replies. It never
    // reads or writes the records or the counters itself, nor names their row types: the use case
    // returns wire values.
    files: ['src/api/routes/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/store/*', '**/store/**', '**/counters', '**/counters.js'],
              message:
                'Routes stay thin (parse → use case → reply): a route imports nothing from store/ or the counters, types included; ask a use case in src/guard/ or src/admin/.',
            },
          ],
        },
      ],
    },
  },
  {
    // Imports point down (docs/architecture.md): the store knows none of the code that uses it.
    files: ['src/store/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/guard/**',
                '**/admin/**',
                '**/jobs/**',
                '**/api/**',
                '**/proxy/**',
                '**/daemon/**',
                '**/cli/**',
                '**/webhooks/**',
              ],
              message: 'src/store/ is the bottom room: it imports nothing from the code above it.',
            },
          ],
        },
      ],
    },
  },
  {
    // The guard's use cases stand on the rules and the store alone: no accounts, jobs, HTTP or proxy.
    files: ['src/guard/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/admin/**',
                '**/jobs/**',
                '**/api/**',
                '**/proxy/**',
                '**/daemon/**',
                '**/cli/**',
                '**/webhooks/**',
              ],
              message: 'src/guard/ imports only the rules, the store, money and the contract.',
            },
          ],
        },
      ],
    },
  },
  {
    // Use cases return values: the HTTP layer, the proxy and the CLI call them, never the reverse.
    files: ['src/admin/**/*.ts', 'src/jobs/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/api/**', '**/proxy/**', '**/cli/**'],
              message: 'Use cases import nothing from the HTTP layer, the proxy or the CLI.',
            },
          ],
        },
      ],
    },
  },
  {
    // All SQL lives in src/store/ (CONTRIBUTING.md): use cases, the proxy, the CLI and bootstrap call store
    // functions named for what they do, and pass their transaction in. Any `.query(` call is caught,
    // whatever its receiver: none outside the store is anything but a statement.
    files: ['src/**'],
    ignores: ['src/store/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.type='MemberExpression'][callee.property.name='query']",
          message: 'SQL lives in src/store/ (CONTRIBUTING.md): add a store function',
        },
      ],
    },
  },
  {
    // The SDK is a package of its own without dependencies: it loads only its own files and Node's.
    files: ['clients/typescript/src/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['../*'],
              message:
                'The client package imports only its own files; what it needs of the contract is in src/shared/ (npm run clients:generate).',
            },
          ],
        },
      ],
    },
  },
  {
    // Small modules and functions a reader can hold in mind (issue #53). The migrations are one
    // ordered list; route and CLI command declarations read as tables, one entry per route or command.
    files: ['src/**/*.ts', 'src/**/*.js'],
    ignores: ['src/store/migrations.ts'],
    rules: { 'max-lines': ['error', { max: 400 }] },
  },
  {
    files: ['src/**/*.ts', 'src/**/*.js'],
    ignores: ['src/api/routes/**', 'src/cli/commands/**'],
    rules: { 'max-lines-per-function': ['error', { max: 80 }] },
  },
  {
    // Code others must change: names that say what a thing is (CONTRIBUTING.md, "Style"), loop
    // indexes aside.
    files: [
      'src/api/**/*.ts',
      'src/cli/**/*.ts',
      'clients/typescript/src/**/*.ts',
      'src/money/**/*.ts',
      'src/proxy/**/*.ts',
      'src/rules/**/*.ts',
      'src/guard/**/*.ts',
      'src/admin/**/*.ts',
      'src/jobs/**/*.ts',
      'src/store/**/*.ts',
      'src/webhooks/**/*.ts',
    ],
    rules: {
      'id-length': ['error', { min: 2, exceptions: ['i', 'j', 'n', '_'], properties: 'never' }],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    // Plain JavaScript runs on Node: its globals (TypeScript files get theirs from @types/node).
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: {
      globals: Object.fromEntries(
        [
          'process',
          'performance',
          'console',
          'URL',
          'setTimeout',
          'clearTimeout',
          'setInterval',
          'clearInterval',
          'setImmediate',
        ].map((name) => [name, 'readonly']),
      ),
    },
  },
  {
    // Rows from pg are `any` until the store maps them to its own types, and tests read answers
    // loosely to assert on them: the rules against `any` leaking stay off there only.
    files: ['src/store/**/*.ts', 'test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
    },
  },
  {
    // Tests: stubs and fixtures are typed loosely on purpose.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/unbound-method': 'off',
      // Answers are read loosely (`as any`) to assert on them; errors are printed into messages.
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-base-to-string': 'off',
      '@typescript-eslint/restrict-plus-operands': 'off',
      'preserve-caught-error': 'off',
      'no-loss-of-precision': 'off', // a test sends an over-precise number on purpose
      'no-control-regex': 'off', // tests strip the CLI's terminal colours (ESC sequences)
    },
  },
);
