/**
 * The one SQL surface the stores use, with two engines behind it: a `pg` pool against a real
 * Postgres, or an embedded Postgres (PGlite) in this process when no DATABASE_URL is configured.
 */
import { createHash } from 'node:crypto';
import { chmod, mkdir } from 'node:fs/promises';
import pg from 'pg';
import type { PGlite, Transaction } from '@electric-sql/pglite';
import { lockDirectory } from './embedded/directory-lock.js';

export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

export interface Queryable {
  query<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<QueryResult<R>>;
  /** Runs a script of several statements, without parameters (migrations). */
  exec(sql: string): Promise<void>;
}

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'embedded';
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** Runs the cheapest statement: resolves when the database answers. */
export async function pingDatabase(db: Queryable): Promise<void> {
  await db.query('SELECT 1');
}

/** Deadlock victim, serialization failure. */
const RETRYABLE = new Set(['40P01', '40001']);

/** Postgres error code of a unique violation. */
export const UNIQUE_VIOLATION = '23505';

/**
 * The database refused a statement for what it said (invalid data, a constraint, a deadlock or
 * serialization loser), as opposed to failing to run it: the same work split differently may pass.
 */
export function isStatementRefusal(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|23|40)[0-9A-Z]{3}$/.test(code);
}

/** Connection-level failures: the daemon is fine, its database is not. */
const DATABASE_DOWN = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE']);
/**
 * Postgres's classes of the same (SQLSTATE): 08 connection exception, 53 insufficient resources
 * (too many connections, disk full), 57 operator intervention (shutdown, cannot connect now,
 * statement timeout).
 */
const DATABASE_DOWN_CLASS = /^(08|53|57)[0-9A-Z]{3}$/;

/** A failure that passes when the database is back: worth answering 503 (and retrying). */
export function isDatabaseDown(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return (
    (typeof code === 'string' && (DATABASE_DOWN.has(code) || DATABASE_DOWN_CLASS.test(code))) ||
    (typeof message === 'string' &&
      /Connection terminated|timeout exceeded when trying to connect|connect ECONNREFUSED|not currently accepting connections/.test(
        message,
      ))
  );
}

export function isUniqueViolation(error: unknown, constraint?: string): boolean {
  const failure = error as { code?: string; constraint?: string; message?: string };
  if (failure?.code !== UNIQUE_VIOLATION) return false;
  return !constraint || failure.constraint === constraint || (failure.message ?? '').includes(constraint);
}

export interface PostgresOptions {
  connectionString: string;
  max?: number;
  statementTimeoutMs?: number;
  connectionTimeoutMs?: number;
}

/**
 * Every query runs as a named prepared statement: each connection parses and plans a statement
 * once, then only binds and executes it (the hot path's CTEs cost more to plan than to run).
 * Names are derived from the text, so the same SQL shares one name on every connection.
 */
const statementNames = new Map<string, string>();
/** Past this many texts, new ones run unnamed: no connection holds unboundedly many statements. */
const MAX_NAMED_STATEMENTS = 1_000;
function statementName(sql: string): string | undefined {
  let name = statementNames.get(sql);
  if (name === undefined && statementNames.size < MAX_NAMED_STATEMENTS) {
    name = `rg_${createHash('sha1').update(sql).digest('base64url')}`;
    statementNames.set(sql, name);
  }
  return name;
}

export function postgresDb(options: PostgresOptions): Db {
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5_000,
    statement_timeout: options.statementTimeoutMs ?? 10_000,
    application_name: 'runguard',
  });
  // An idle client losing its server emits 'error' on the pool; without a listener Node would crash.
  pool.on('error', () => {});
  const wrap = (client: pg.Pool | pg.PoolClient): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const result = await client.query({
        name: statementName(sql),
        text: sql,
        values: params as unknown[] | undefined,
      });
      return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
    },
    async exec(sql: string) {
      await client.query(sql);
    },
  });
  return {
    kind: 'postgres',
    ...wrap(pool),
    async transaction(fn) {
      for (let attempt = 1; ; attempt++) {
        const client = await pool.connect();
        // A checked-out client whose server goes away between two statements emits 'error', and the
        // pool listens only to idle ones: without this, Node would crash the daemon. The statement
        // that runs next fails instead, and the pool drops the broken client on release.
        const onError = () => {};
        client.on('error', onError);
        try {
          await client.query('BEGIN');
          const result = await fn(wrap(client));
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {});
          // Postgres chose this transaction as a deadlock victim (or a serialization loser): nothing
          // of it committed, so running it again is safe.
          if (!RETRYABLE.has((error as { code?: string }).code ?? '') || attempt >= 3) throw error;
        } finally {
          client.off('error', onError);
          client.release();
        }
      }
    },
    close: () => pool.end(),
  };
}

export async function embeddedDb(dataDir: string | null): Promise<Db> {
  const { PGlite } = await import('@electric-sql/pglite');
  let release = async () => {};
  if (dataDir) {
    // Postgres's own rule for a data directory: its owner's alone. The files PGlite writes in it
    // are 0666 (its template's), and hold every record, the WAL with the JWT secret included.
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    await chmod(dataDir, 0o700);
    release = await lockDirectory(`${dataDir}.lock`, dataDir);
  }
  let lite: PGlite;
  try {
    lite = dataDir ? await PGlite.create(dataDir) : await PGlite.create();
  } catch (error) {
    await release();
    throw error;
  }
  const wrap = (client: PGlite | Transaction): Queryable => ({
    async query<R>(sql: string, params?: readonly unknown[]) {
      const result = await client.query<R>(sql, params as unknown[] | undefined);
      return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length };
    },
    async exec(sql: string) {
      await client.exec(sql);
    },
  });
  return {
    kind: 'embedded',
    ...wrap(lite),
    transaction: (fn) => lite.transaction((tx) => fn(wrap(tx))),
    async close() {
      await lite.close();
      await release();
    },
  };
}
