/**
 * Every `runguard` command, in the order `--help` lists them. A new command is a module in this
 * folder (see `../command.ts` for the shared shape) and one line here.
 */
import type { Command } from 'commander';
import { dashboardCommand } from './dashboard.js';
import { execCommand } from './exec.js';
import { budgetsCommand } from './budgets.js';
import { keysCommand } from './keys.js';
import { killSwitchCommand } from './kill-switch.js';
import { mcpCommand, toolsCommand } from './mcp.js';
import { migrateCommand } from './migrate.js';
import { pricingCommand } from './pricing.js';
import { reconcileCommand } from './reconcile.js';
import { retentionCommand } from './retention.js';
import { runsCommand } from './runs.js';
import { startCommand } from './start.js';
import { statusCommand } from './status.js';
import { usageCommand } from './usage.js';
import { usersCommand } from './users.js';
import { webhooksCommand } from './webhooks.js';
import { budgetCommand, limitsCommand } from './workspace.js';

export const COMMANDS: (() => Command)[] = [
  startCommand,
  execCommand,
  migrateCommand,
  statusCommand,
  dashboardCommand,
  runsCommand,
  pricingCommand,
  killSwitchCommand,
  mcpCommand,
  toolsCommand,
  usersCommand,
  budgetCommand,
  budgetsCommand,
  usageCommand,
  limitsCommand,
  keysCommand,
  retentionCommand,
  webhooksCommand,
  reconcileCommand,
];
