// ESLint 9 flat config: @eslint/js and typescript-eslint's recommended rules over the product,
// the engine workspace, the tests and the benches. Formatting is prettier's (npm run format).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'captures/**', 'captures-demo/**', 'bench/out/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: 'module',
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        queueMicrotask: 'readonly',
        fetch: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // No function in the product, the engine or the benches over 60 lines (blank lines and
    // comments aside) without a reason: a longer one says why in its doc comment and disables the
    // rule on its line. Tests are not held to it (a test reads top to bottom as one scenario).
    files: ['src/**/*.ts', 'packages/engine/src/**/*.ts', 'bench/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true, IIFEs: true }] },
  },
  {
    // The pages' scripts wrap their whole body in one IIFE (a classic script's own scope): the
    // wrapper is not a function to split; the functions inside it are held to 60 lines.
    files: ['src/browser/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true, IIFEs: false }] },
  },

  {
    // Tests read engines' JSON loosely, as a client would; the product never does.
    files: ['test/**/*.ts', 'packages/engine/test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The pages' scripts (src/browser, type-checked by its own tsconfig with the DOM lib): scripts,
    // not modules — strip.ts's functions are called by report.ts and live.ts in one page scope.
    files: ['src/browser/**/*.ts'],
    languageOptions: { sourceType: 'script' },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { vars: 'local', args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
);
