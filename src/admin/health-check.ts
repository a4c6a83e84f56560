/** The daemon's dependencies as `/health` reports them: its database and its counter store. */
import type { Health } from '../contract/index.js';
import type { CounterStore } from '../store/counters/counters.js';
import { pingDatabase, type Db } from '../store/db.js';

/** A probe that hangs counts as down: the report must come back even when a dependency does not. */
const CHECK_TIMEOUT_MS = 2_000;

async function check(probe: () => Promise<unknown>): Promise<'ok' | 'unavailable'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timeout')), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([probe(), timeout]);
    return 'ok';
  } catch {
    return 'unavailable';
  } finally {
    clearTimeout(timer);
  }
}

export class HealthCheck {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly version: string,
  ) {}

  /** `status` says whether all is up; when not, `detail` names what is down. */
  async report(): Promise<Health> {
    const [database, counterStore] = await Promise.all([
      check(() => pingDatabase(this.db)),
      check(() => this.counters.health()),
    ]);
    const checks = { database, counters: counterStore };
    const down = Object.entries(checks)
      .filter(([, state]) => state !== 'ok')
      .map(([name]) => name);
    const { version } = this;
    if (down.length === 0) return { status: 'ok', version, checks, counter_store: this.counters.kind };
    return {
      status: 'unavailable',
      version,
      checks,
      counter_store: this.counters.kind,
      detail: `Unavailable: ${down.join(', ')}.`,
      code: 'SERVICE_UNAVAILABLE',
    };
  }
}
