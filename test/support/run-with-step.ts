import type { GuardService } from '../../src/guard/guard-service.js';

/** A run of a proxied call's own with its first step, once both are durable (as the proxy waits). */
export async function runWithStep(guard: GuardService, ...args: Parameters<GuardService['decideRunWithStep']>) {
  return (await guard.decideRunWithStep(...args)).recorded;
}
