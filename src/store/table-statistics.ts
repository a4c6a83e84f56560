/** A table's planner statistics, taken again as the daemon grows the table. */
import type { Db } from './db.js';

/** The tables the hot batch statements look rows up in by key. */
export type GrownTable = 'steps' | 'runs';

/** Rows written by this daemon after which the table is analyzed: once at each. */
const THRESHOLDS = [1_000, 10_000, 100_000] as const;

/**
 * Every connection prepares its statements once (db.ts), and Postgres keeps the generic plan it
 * made for one until the statistics of a table it reads change. A plan made while a table was
 * nearly empty (a new database) scans it, which is then as cheap as looking rows up by key; with
 * no ANALYZE afterwards (autovacuum off, as on the CI host) that scan stays for the connection's
 * life, however large the table grows: a batch of step results read every step ever written.
 * ANALYZE gives the planner the table's size and makes every connection plan its statements
 * again; past 1,000 rows the plans by key are the cheaper and stay so as the table grows, so a
 * few ANALYZEs suffice. Where autovacuum runs it analyzes as well; these add nothing wrong.
 * Not on the embedded database: it plans each statement anew, and one ANALYZE there would hold
 * its only connection.
 */
export class TableStatistics {
  private written = 0;
  private passed = 0;
  private analyzing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly table: GrownTable,
    /** An ANALYZE that failed (a daemon without the table's ownership, a closing pool): nothing else depends on it. */
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Counts rows this daemon wrote; past a threshold, analyzes the table (not awaited). */
  wrote(rows: number): void {
    if (this.db.kind !== 'postgres' || this.passed === THRESHOLDS.length) return;
    this.written += rows;
    if (this.written < THRESHOLDS[this.passed]!) return;
    while (this.passed < THRESHOLDS.length && this.written >= THRESHOLDS[this.passed]!) this.passed++;
    this.analyzing = this.analyzing
      .then(() => this.db.exec(`ANALYZE ${this.table}`))
      .catch((error: unknown) => {
        this.onError(error);
      });
  }

  /** Resolves once an ANALYZE started is done (before the stores close). */
  settled(): Promise<void> {
    return this.analyzing;
  }
}
