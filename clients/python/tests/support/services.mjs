// The Python tests' access to the machine's Postgres and Redis, through the daemon's own drivers
// (pg, ioredis in the repository's node_modules): the Python side then needs nothing beyond httpx.
//   node services.mjs create-database          -> prints a postgres:// URL of a fresh database
//   node services.mjs drop-database <url>
//   node services.mjs delete-keys <prefix>     -> deletes the Redis keys under the prefix
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

const require = createRequire(fileURLToPath(new URL('../../../../package.json', import.meta.url)));
const pg = require('pg');
const { Redis } = require('ioredis');

const ADMIN_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

async function admin(sql) {
  const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

const [command, argument] = process.argv.slice(2);
if (command === 'create-database') {
  const name = `rg_pytest_${randomBytes(6).toString('hex')}`;
  await admin(`CREATE DATABASE ${name}`);
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  process.stdout.write(`${url}\n`);
} else if (command === 'drop-database') {
  const name = new URL(argument).pathname.slice(1);
  if (!/^rg_pytest_[0-9a-f]{12}$/.test(name)) throw new Error(`not a test database: ${name}`);
  await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
} else if (command === 'delete-keys') {
  if (!/^rgpy:[0-9a-f]{12}:$/.test(argument ?? '')) throw new Error(`not a test key prefix: ${argument}`);
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    for await (const keys of redis.scanStream({ match: `${argument}*`, count: 1_000 })) {
      if (keys.length > 0) await redis.unlink(...keys);
    }
  } finally {
    redis.disconnect();
  }
} else {
  throw new Error(`unknown command: ${command}`);
}
