/**
 * What the daemon tells the operator on its terminal as it starts. Never through the logger: the
 * first start's lines carry the new API key and a one-time sign-in token.
 */
import type { Logger } from 'pino';
import { SIGN_IN_LINK_TTL_MS } from '../admin/dashboard-sign-in.js';
import { cliCommand } from '../cli-command.js';
import { systemClock } from '../clock.js';
import type { Db } from '../store/db.js';
import { createSignInLink } from '../store/sign-in-links.js';
import type { Bootstrapped } from './bootstrap.js';

/** The workspace a first start created, and its key: shown once, here only. */
export function noticeCreatedWorkspace(out: NodeJS.WritableStream, plan: string, created: Bootstrapped): void {
  out.write(
    `runguard: created the default workspace (${plan} plan).\n` +
      `runguard: API key: ${created.apiKey}\nrunguard: saved to ${created.keyFile} (mode 0600); it is not shown again.\n`,
  );
}

/** Where the dashboard is, and how to sign in to it. */
export function noticeDashboard(out: NodeJS.WritableStream, dashboardUrl: string): void {
  out.write(
    `runguard: dashboard at ${dashboardUrl}/ (sign in with \`${cliCommand('dashboard')}\`: it prints a one-time link)\n`,
  );
}

/**
 * On the start that created the workspace, a first sign-in link beside the key: the operator is
 * one click from the dashboard. It works once, for 10 minutes; `runguard dashboard` prints another.
 */
export async function noticeFirstSignInLink(
  out: NodeJS.WritableStream,
  db: Db,
  workspaceId: string,
  dashboardUrl: string,
  logger: Logger,
): Promise<void> {
  try {
    const link = await createSignInLink(db, workspaceId, systemClock.now(), SIGN_IN_LINK_TTL_MS);
    out.write(`runguard: open ${dashboardUrl}/sign-in#token=${link.token} to sign in (works once, for 10 minutes)\n`);
  } catch (error) {
    logger.warn({ err: error }, `no first sign-in link: run \`${cliCommand('dashboard')}\` for one`);
  }
}
