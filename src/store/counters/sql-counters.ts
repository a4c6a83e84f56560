/** The counter store of a daemon without Redis: it reads the records directly. */
import type { Queryable } from '../db.js';
import {
  recordedSpend,
  type CounterScope,
  type CounterStore,
  type DailySpend,
  type DecisionCounters,
  type SpendScope,
} from './counters.js';
import { takeSqlStepSlot, type StepSlot, type StepSlotRequest } from './step-rate.js';

export class SqlCounters implements CounterStore {
  readonly kind = 'sql';

  constructor(private readonly db: Queryable) {}

  readSpend(scope: SpendScope): Promise<DailySpend> {
    return recordedSpend(this.db, scope);
  }

  /** Nothing shares a version here: decisions read the state from the records. */
  async readDecisionInputs(scope: CounterScope): Promise<DecisionCounters> {
    return { spend: await recordedSpend(this.db, scope), stateVersion: null };
  }

  /** The records are the counters. */
  async spendRecorded(): Promise<void> {}
  async resyncSpend(): Promise<void> {}

  async stateChanged(): Promise<void> {}

  takeStepSlot(tx: Queryable, scope: CounterScope, request: StepSlotRequest): Promise<StepSlot> {
    return takeSqlStepSlot(tx, scope, request);
  }

  async health(): Promise<void> {
    await this.db.query('SELECT 1');
  }

  async close(): Promise<void> {}
}
