/** `runguard kill-switch on|off`: denies every run start and step of the workspace while on. */
import { Argument } from 'commander';
import { apiCommand, withApi } from '../command.js';
import { timestamp } from '../output.js';

export function killSwitchCommand() {
  return apiCommand('kill-switch', 'turn the workspace kill switch on (deny everything) or off (Scale plan or higher)')
    .addArgument(new Argument('<state>', 'on or off').choices(['on', 'off']))
    .action(
      withApi(async ({ client, out }, _options, state: string) => {
        const result = await client.setKillSwitch(state === 'on');
        if (out.json) return out.data(result);
        out.line(
          result.active
            ? `Kill switch is ON: every run start and step is denied (since ${timestamp(result.updated_at)}).`
            : `Kill switch is OFF (since ${timestamp(result.updated_at)}).`,
        );
      }),
    );
}
