/**
 * `runguard dashboard`: prints a one-time sign-in link to the web dashboard for the key's
 * workspace (by default the local key file's: the workspace the first start created). The link
 * works once, for 10 minutes; the token rides in the URL's fragment, which browsers never send.
 */
import type { SignInLink } from '../../contract/index.js';
import { apiCommand, withApi } from '../command.js';
import { timestamp } from '../output.js';

export function dashboardCommand() {
  return apiCommand('dashboard', 'print a one-time sign-in link to the web dashboard (single use, 10 minutes)').action(
    withApi(async ({ client, connection, out }) => {
      const link = await client.request<SignInLink>('POST', '/v1/auth/sign-in-links');
      const url = `${connection.url.replace(/\/+$/, '')}${link.path}`;
      if (out.json) return out.data({ url, expires_at: link.expires_at });
      out.line(`Open this link to sign in to the dashboard (works once, until ${timestamp(link.expires_at)}):`);
      out.line(url);
    }),
  );
}
