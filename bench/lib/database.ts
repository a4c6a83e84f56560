/**
 * A fresh Postgres database and Redis key prefix per bench run, made the way the tests make
 * theirs (test/support/services.ts: CREATE DATABASE on the admin connection), dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';

export const ADMIN_DATABASE_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface BenchServices {
  databaseUrl: string;
  databaseName: string;
  redisUrl: string;
  redisKeyPrefix: string;
  drop(): Promise<void>;
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function createServices(): Promise<BenchServices> {
  const id = randomBytes(5).toString('hex');
  const databaseName = `rg_bench_${id}`;
  await admin((c) => c.query(`CREATE DATABASE ${databaseName}`));
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${databaseName}`;
  const redisKeyPrefix = `rgbench:${id}:`;
  return {
    databaseUrl: url.toString(),
    databaseName,
    redisUrl: REDIS_URL,
    redisKeyPrefix,
    async drop() {
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`));
      const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
      try {
        await redis.connect();
        let cursor = '0';
        do {
          const [next, keys] = await redis.scan(cursor, 'MATCH', `${redisKeyPrefix}*`, 'COUNT', 1000);
          if (keys.length) await redis.del(...keys);
          cursor = next;
        } while (cursor !== '0');
      } finally {
        redis.disconnect();
      }
    },
  };
}

/** A direct connection to the bench database, for seeding history. */
export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}
