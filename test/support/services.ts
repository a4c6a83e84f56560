/**
 * The real Postgres and Redis the tests talk to. Each test file gets a database of its own, so
 * files run in parallel and repeatedly. A missing service fails the suite loudly: never a skip.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';

export const ADMIN_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

/** Runs `fn` on a connection to the admin database, closed afterwards. */
export async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL, connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(
      `The tests need PostgreSQL at ${ADMIN_DATABASE_URL} (set TEST_DATABASE_URL): ${(error as Error).message}`,
    );
  }
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * A fresh database; `encoding` other than the server's default (LATIN1, say) comes with the C locale.
 * `template`: a copy of that database (postgres-template.ts: one already migrated) instead of an empty one.
 */
export async function createTestDatabase(
  options: { encoding?: string; template?: string } = {},
): Promise<TestDatabase> {
  const name = `rg_test_${randomBytes(6).toString('hex')}`;
  const encoding = options.encoding
    ? ` ENCODING '${options.encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`
    : options.template
      ? ` TEMPLATE ${options.template}`
      : '';
  await admin((c) => c.query(`CREATE DATABASE ${name}${encoding}`));
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

/** The prefixes handed out in this test file (each file has its own module instance). */
const handedOut: string[] = [];

/** A key prefix of its own, so tests sharing one Redis never see each other's keys. */
export function testKeyPrefix(): string {
  const prefix = `rgt:${randomBytes(6).toString('hex')}:`;
  handedOut.push(prefix);
  return prefix;
}

/**
 * Deletes the keys under every prefix this file was handed (`test/support/redis-cleanup.ts` runs it
 * after each file): a workspace's state version never expires, so without this every run of the
 * suite would leave keys behind in the machine's Redis.
 */
export async function deleteTestKeys(): Promise<void> {
  if (handedOut.length === 0) return;
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    for (const prefix of handedOut.splice(0)) {
      for await (const keys of redis.scanStream({ match: `${prefix}*`, count: 1_000 })) {
        if ((keys as string[]).length > 0) await redis.unlink(...(keys as string[]));
      }
    }
  } finally {
    redis.disconnect();
  }
}
