/**
 * `callCost` (TypeScript) against `costSql` (what Postgres computes when it stores a step's
 * result), digit for digit, on random counts and prices. The hand-computed cases are in
 * test/unit/money/cost.test.ts.
 */
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callCost, callCostMicros, costSql, formatDecimal } from '../../src/money/cost.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

describe('callCost and callCostMicros agree with costSql, as Postgres computes it', () => {
  let database: TestDatabase;
  let client: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    client = new pg.Client({ connectionString: database.url });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await database?.drop();
  });

  const count = fc.option(fc.integer({ min: 0, max: 2_000_000_000 }), { nil: null });
  const price = fc
    .tuple(fc.integer({ min: 0, max: 99_999 }), fc.integer({ min: 0, max: 12 }))
    .map(([digits, scale]) => formatDecimal({ digits: BigInt(digits), scale }));

  it('when counts and prices are random, then both give the same digits', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({ promptTokens: count, completionTokens: count, cacheReadTokens: count, cacheWriteTokens: count }),
        fc.record({
          input: price,
          output: price,
          cacheRead: fc.option(price, { nil: null }),
          cacheWrite: fc.option(price, { nil: null }),
          // A long-context tier, at thresholds the random prompts fall on either side of.
          longContext: fc.option(
            fc.record({
              abovePromptTokens: fc.integer({ min: 0, max: 2_000_000_000 }),
              input: price,
              output: price,
              cacheRead: fc.option(price, { nil: null }),
              cacheWrite: fc.option(price, { nil: null }),
            }),
            { nil: null },
          ),
        }),
        async (t, p) => {
          const cost = costSql(
            { prompt: '$1::bigint', completion: '$2::bigint', cacheRead: '$3::bigint', cacheWrite: '$4::bigint' },
            'p',
          );
          // The micros as a result's statement rounds them (step-finish.ts).
          const sql = `SELECT trim_scale(${cost})::text AS cost, round(${cost} * 1000000)::text AS micros
          FROM (SELECT $5::numeric AS input_cost_per_token, $6::numeric AS output_cost_per_token,
            $7::numeric AS cache_read_input_cost_per_token, $8::numeric AS cache_write_input_cost_per_token,
            $9::bigint AS long_context_above_tokens, $10::numeric AS long_input_cost_per_token,
            $11::numeric AS long_output_cost_per_token, $12::numeric AS long_cache_read_input_cost_per_token,
            $13::numeric AS long_cache_write_input_cost_per_token) p`;
          const long = p.longContext;
          const { rows } = await client.query(sql, [
            t.promptTokens,
            t.completionTokens,
            t.cacheReadTokens,
            t.cacheWriteTokens,
            p.input,
            p.output,
            p.cacheRead,
            p.cacheWrite,
            long?.abovePromptTokens ?? null,
            long?.input ?? null,
            long?.output ?? null,
            long?.cacheRead ?? null,
            long?.cacheWrite ?? null,
          ]);
          expect(rows[0].cost).toBe(callCost(t, p));
          expect(rows[0].micros).toBe(callCostMicros(t, p)?.toString() ?? null);
        },
      ),
      { numRuns: 300 },
    );
  });
});
