/**
 * How a message names a CLI command: as the README runs it. Its set-up installs runguard as a
 * project dependency, which puts no `runguard` on the PATH, so a bare `runguard dashboard` in a
 * hint would not run as printed; `npx runguard dashboard` does.
 */
export function cliCommand(args: string): string {
  return `npx runguard ${args}`;
}
