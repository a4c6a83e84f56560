/** `runguard kill-switch [on|off]`: denies every run start and step of the workspace while on; no argument shows it. */
import { Argument } from 'commander';
import type { Workspace } from '../../contract/index.js';
import { apiCommand, withApi } from '../command.js';
import type { Output } from '../output.js';
import { timestamp } from '../output.js';

const PLANS_WITH_KILL_SWITCH = ['scale', 'enterprise'];

function say(out: Output, active: boolean, since?: string) {
  const when = since ? ` (since ${timestamp(since)})` : '';
  out.line(
    active
      ? `Kill switch is ${out.style.bad('ON')}: every run start and step is denied${when}.`
      : `Kill switch is OFF${when}.`,
  );
}

export function killSwitchCommand() {
  return apiCommand(
    'kill-switch',
    'show the workspace kill switch, or turn it on (deny everything) or off (Scale plan or higher)',
  )
    .addArgument(new Argument('[state]', 'on or off; none: show it').choices(['on', 'off']))
    .action(
      withApi(async ({ client, out }, _options, state?: string) => {
        if (state === undefined) {
          const workspace = await client.request<Workspace>('GET', '/v1/workspace');
          if (out.json) return out.data({ active: workspace.kill_switch_active, plan: workspace.plan });
          say(out, workspace.kill_switch_active);
          if (!PLANS_WITH_KILL_SWITCH.includes(workspace.plan)) {
            out.line(`The ${workspace.plan} plan has no kill switch: it needs the scale plan or higher.`);
          }
          return;
        }
        const result = await client.setKillSwitch(state === 'on');
        if (out.json) return out.data(result);
        say(out, result.active, result.updated_at);
      }),
    );
}
