/**
 * Every `runguard` command, in the order `--help` lists them. A new command is a module in this
 * folder (see `../command.ts` for the shared shape) and one line here.
 */
import type { Command } from 'commander';
import { killSwitchCommand } from './kill-switch.js';
import { migrateCommand } from './migrate.js';
import { pricingCommand } from './pricing.js';
import { runsCommand } from './runs.js';
import { startCommand } from './start.js';

export const COMMANDS: (() => Command)[] = [
  startCommand,
  migrateCommand,
  runsCommand,
  pricingCommand,
  killSwitchCommand,
  // The lead adds: statusCommand, usersCommand, budgetCommand, limitsCommand, keysCommand.
];
