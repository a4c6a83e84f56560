/** The package version, read without loading the server (the CLI's client commands stay light). */
import { createRequire } from 'node:module';

export const VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;
