/**
 * What the global setup hands every test file through vitest's `provide`/`inject`. Its own file, so
 * that a program holding the reader but not the global setup (bench/tsconfig.json compiles the
 * harness, not global-setup.ts) still knows the key and its type.
 */
declare module 'vitest' {
  export interface ProvidedContext {
    /** The migrated embedded data directory that `openTestStores('embedded')` copies. */
    embeddedTemplate: string;
    /** The migrated Postgres database that `openTestStores` creates its Postgres databases from. */
    postgresTemplate: string;
  }
}

export {};
