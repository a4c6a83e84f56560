/**
 * Store wrappers that report failures to an observer (metrics) and change nothing else: every
 * call, result and error passes through untouched.
 */
import type { CounterStore } from './counters/counters.js';
import type { Db, Queryable } from './db.js';

export type DbOperation = 'query' | 'exec' | 'transaction';

/** A short, bounded label for a database error; null when the error is not the database's fault. */
export function databaseErrorCode(error: unknown): string | null {
  const failure = error as { code?: unknown; message?: unknown } | null;
  if (!failure || typeof failure !== 'object') return 'unknown';
  const code = typeof failure.code === 'string' ? failure.code : '';
  if (/^[0-9A-Z]{5}$/.test(code)) {
    // Class 23 (constraint violations) is how the service detects duplicates; class 22 is
    // invalid input (NUL in text, bad JSON escapes) answered as a 422: neither is an outage.
    if (code.startsWith('23') || code.startsWith('22')) return null;
    return code;
  }
  if (/^E[A-Z]+$/.test(code)) return code;
  const message = typeof failure.message === 'string' ? failure.message : '';
  if (
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
      message,
    )
  ) {
    return 'connection';
  }
  return null;
}

/**
 * Errors already reported by a query inside a transaction, so the transaction that rethrows
 * them does not report them twice.
 */
const reported = new WeakSet<object>();

export function observeDb(db: Db, onError: (operation: DbOperation, code: string) => void): Db {
  const report = (operation: DbOperation, error: unknown) => {
    if (typeof error === 'object' && error !== null) {
      if (reported.has(error)) return;
      reported.add(error);
    }
    const code = databaseErrorCode(error);
    if (code !== null) onError(operation, code);
  };
  // Every statement passes here: its promise is passed on with a rejection handler, rather than
  // awaited in an async function of its own (one promise and one tick less a statement).
  const wrap = (target: Queryable): Queryable => ({
    query<R>(sql: string, params?: readonly unknown[]) {
      try {
        return target.query<R>(sql, params).catch((error: unknown) => {
          report('query', error);
          throw error;
        });
      } catch (error) {
        report('query', error);
        return Promise.reject(asError(error));
      }
    },
    async exec(sql) {
      try {
        await target.exec(sql);
      } catch (error) {
        report('exec', error);
        throw error;
      }
    },
  });
  return {
    kind: db.kind,
    ...wrap(db),
    async transaction(fn) {
      try {
        return await db.transaction((tx) => fn(wrap(tx)));
      } catch (error) {
        report('transaction', error);
        throw error;
      }
    },
    close: () => db.close(),
  };
}

/** What a store threw synchronously, as the rejection an async function would have made of it. */
const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));

type CounterOperation = Exclude<keyof CounterStore, 'kind'>;

export function observeCounters(counters: CounterStore, onError: (operation: CounterOperation) => void): CounterStore {
  // As `observeDb`'s statements: the counters are read and raised at every call.
  const wrapped =
    <A extends unknown[], R>(operation: CounterOperation, fn: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> => {
      const failed = (error: unknown) => {
        onError(operation);
        throw error;
      };
      try {
        return fn(...args).catch(failed);
      } catch (error) {
        return Promise.reject(asError(error)).catch(failed);
      }
    };
  return {
    kind: counters.kind,
    readSpend: wrapped('readSpend', (scope) => counters.readSpend(scope)),
    readDecisionInputs: wrapped('readDecisionInputs', (scope) => counters.readDecisionInputs(scope)),
    spendRecorded: wrapped('spendRecorded', (scope, totals) => counters.spendRecorded(scope, totals)),
    resyncSpend: wrapped('resyncSpend', (scope, totals) => counters.resyncSpend(scope, totals)),
    stateChanged: wrapped('stateChanged', (workspaceId) => counters.stateChanged(workspaceId)),
    takeStepSlot: wrapped('takeStepSlot', (tx, scope, request) => counters.takeStepSlot(tx, scope, request)),
    health: wrapped('health', () => counters.health()),
    close: () => counters.close(),
  };
}
