/** What a CLI command can fail with, and the exit status each maps to. */
import { cliCommand } from '../cli-command.js';

export const EXIT = {
  /** The server refused the request, or the input was wrong. */
  FAILURE: 1,
  /** Nothing answered at the daemon's URL. */
  UNREACHABLE: 3,
  /** `exec`: the guard refused the run, so the command was not started. */
  BLOCKED: 3,
} as const;

export class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: number = EXIT.FAILURE,
  ) {
    super(message);
  }
}

/** The daemon answered with an error status; `detail` is its sentence for people. */
export class ApiRequestError extends CliError {
  override name = 'ApiRequestError';
  constructor(
    readonly status: number,
    readonly code: string | null,
    readonly detail: string,
    readonly errors: { path: string; message: string }[] = [],
  ) {
    super(detail, EXIT.FAILURE);
  }
}

/** Where the CLI found the daemon's URL and its key: failures name them. */
export interface ConnectionOrigin {
  urlSource: string;
  keySource: string;
  looked: string[];
  overriddenKeyFile?: string;
}

export class DaemonUnreachableError extends CliError {
  override name = 'DaemonUnreachableError';
  constructor(url: string, reason: string, origin?: Pick<ConnectionOrigin, 'urlSource' | 'looked'>) {
    const from = origin ? ` (the URL from ${origin.urlSource})` : '';
    const looked =
      origin && origin.looked.length > 0
        ? `\nLooked for a daemon in:\n${origin.looked.map((place) => `  ${place}`).join('\n')}`
        : '';
    super(
      `cannot reach the runguard daemon at ${url}${from}: ${reason}. Is it running? Start it with \`${cliCommand('start')}\`, ` +
        `or point the CLI at it with --url or RUNGUARD_URL.${looked}`,
      EXIT.UNREACHABLE,
    );
  }
}

/** What to add to a 401: which key was refused, and a key file it overrode. */
export function keyHint(origin: Pick<ConnectionOrigin, 'keySource' | 'overriddenKeyFile'>): string {
  const override = origin.overriddenKeyFile
    ? ` It overrides ${origin.overriddenKeyFile}, which holds another key (\`${cliCommand('keys regenerate')}\` rewrites that file): ` +
      `unset ${origin.keySource === '--api-key' ? 'the option' : origin.keySource} to use it.`
    : '';
  return `: the API key from ${origin.keySource} was refused.${override}`;
}

/** The message for a failed command, with a 422's field errors on their own lines. */
export function describeError(error: unknown): { message: string; exitCode: number } {
  if (error instanceof ApiRequestError) {
    const fields = error.errors.map((fieldError) => `\n  ${fieldError.path}: ${fieldError.message}`).join('');
    return { message: `${error.detail}${fields}`, exitCode: error.exitCode };
  }
  if (error instanceof CliError) return { message: error.message, exitCode: error.exitCode };
  return { message: (error as Error)?.message ?? String(error), exitCode: EXIT.FAILURE };
}
