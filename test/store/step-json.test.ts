/**
 * writeStep against Postgres writing the same step: each step below, written from its binary
 * columns here, is byte for byte what the SQL that wrote run details before (kept here as the
 * reference) writes for it: escapes, exact costs, caller JSON as stored, dates cut to the
 * millisecond. On Postgres and on the embedded backend, whose binary forms are Postgres's too.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binaryCopyRows } from '../../src/store/binary-copy.js';
import { embeddedDb, postgresDb, type Db } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { JsonBytes, STEP_COLUMNS, stepJsonSize, writeStep } from '../../src/store/step-json.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

/** A step as Postgres wrote it into run details before writeStep (`to_json`, `to_char`, `trim_scale`). */
const POSTGRES_STEP_JSON = `concat('{"id":"', s.id,
  '","type":', to_json(s.type),
  ',"status":', to_json(s.status),
  ',"sequence":', s.sequence,
  ',"model":', coalesce(to_json(s.model)::text, 'null'),
  ',"tool_name":', coalesce(to_json(s.tool_name)::text, 'null'),
  ',"prompt_tokens":', coalesce(s.prompt_tokens::text, 'null'),
  ',"completion_tokens":', coalesce(s.completion_tokens::text, 'null'),
  ',"cached_prompt_tokens":', coalesce(s.cached_prompt_tokens::text, 'null'),
  ',"cache_read_tokens":', coalesce(s.cached_prompt_tokens::text, 'null'),
  ',"cache_write_tokens":', coalesce(s.cache_write_tokens::text, 'null'),
  ',"reasoning_tokens":', coalesce(s.reasoning_tokens::text, 'null'),
  ',"cost_usd":', coalesce(to_json(trim_scale(CASE WHEN s.cost_usd NOT IN ('NaN', 'Infinity', '-Infinity') THEN s.cost_usd END))::text, 'null'),
  ',"duration_ms":', coalesce(s.duration_ms::text, 'null'),
  ',"input_data":', coalesce(s.input_json::text, s.input_data::text, 'null'),
  ',"output_data":', coalesce(s.output_json::text, s.output_data::text, 'null'),
  ',"decision":', s.decision,
  ',"created_at":', coalesce('"' || to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"', 'null'), '}')`;

/** Every ASCII byte, quotes and backslashes among them, and text outside the Basic Multilingual Plane. */
const ODD_TEXT =
  String.fromCharCode(...Array.from({ length: 128 }, (_, i) => i).filter((c) => c !== 0)) + 'é✓😀\u2028\u2029';

const COSTS = [
  '0',
  '-0.5',
  '0.00000015',
  '0.000123456789012345678901',
  '12345.678900',
  '10000',
  '0.0001',
  '100000000',
  '99999999999999999999.99990000',
  '-1e-30',
  '1e40',
  '0.1000',
  'NaN',
  'Infinity',
  '-Infinity',
  null,
];
const INTEGERS = [
  '0',
  '-1',
  '9007199254740991',
  '9007199254740993',
  '-9223372036854775808',
  '9223372036854775807',
  null,
];
const DATES = [
  '2026-03-01 12:00:00.999999+00',
  '1999-12-31 23:59:59.9995+00',
  '1970-01-01 00:00:00+00',
  '1969-12-31 23:59:59.0001+00',
  '0001-01-01 00:00:00+00',
  '9999-12-31 23:59:59.999999+00',
  '2026-03-01 13:00:00+02',
  '2285-06-01 00:00:00.0015+00',
  '1700-01-01 00:00:00.0015+00',
  'infinity',
  '-infinity',
];

describe.each([
  [
    'postgres',
    async () => {
      const database = await createTestDatabase();
      return { db: postgresDb({ connectionString: database.url, max: 2 }), database };
    },
  ],
  ['embedded', async () => ({ db: await embeddedDb(null), database: null as TestDatabase | null })],
] as const)('writeStep on %s', (_name, open) => {
  let db: Db;
  let database: TestDatabase | null;
  let runId: string;
  let workspaceId: string;
  let sequence = 0;

  beforeAll(async () => {
    ({ db, database } = await open());
    await migrate(db);
    workspaceId = (await createWorkspace(db, 'step-json', 'enterprise')).id;
    runId = randomUUID();
    await db.query(
      `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at)
       VALUES ($1, $2, 'u', 'RUNNING', '{"outcome":"ALLOW","reason":null,"evaluated_rules":{}}', now())`,
      [runId, workspaceId],
    );
  });
  afterAll(async () => {
    await db?.close();
    await database?.drop();
  });

  /** Writes steps with these columns (the rest plain); their sequences. */
  async function insert(steps: Record<string, string | null>[]): Promise<number[]> {
    // `sequence`: else the next one
    const sequences: number[] = [];
    for (const { sequence: given, ...step } of steps) {
      const columns = {
        type: 'MODEL_CALL',
        status: 'COMPLETED',
        decision: '{"outcome":"ALLOW"}',
        created_at: '2026-03-01 12:00:00+00',
        ...step,
      };
      const names = Object.keys(columns);
      sequences.push(given === undefined ? ++sequence : Number(given));
      await db.query(
        `INSERT INTO steps (id, run_id, workspace_id, sequence, ${names.join(', ')})
         VALUES ($1, $2, $3, $4, ${names.map((_, i) => `$${i + 5}`).join(', ')})`,
        [randomUUID(), runId, workspaceId, sequences.at(-1), ...Object.values(columns)],
      );
    }
    return sequences;
  }

  /** The steps of these sequences as writeStep writes them, and as Postgres does. */
  async function both(sequences: number[]): Promise<{ written: string[]; postgres: string[] }> {
    const where = `s.run_id = '${runId}' AND s.sequence IN (${sequences.join(', ')})`;
    const rows = binaryCopyRows(
      await db.copyOut(`SELECT ${STEP_COLUMNS.join(', ')} FROM steps s WHERE ${where} ORDER BY s.sequence`),
    );
    // One answer for all, as a page is written (its date cache shared), cut back into steps.
    const out = new JsonBytes(stepJsonSize(rows));
    const ends = Array.from({ length: rows.length }, (_, r) => {
      writeStep(out, rows, r, 0);
      return Buffer.concat(out.blocks()).length;
    });
    const all = Buffer.concat(out.blocks());
    const written = ends.map((end, r) => all.subarray(r > 0 ? ends[r - 1] : 0, end).toString('utf8'));
    const { rows: postgres } = await db.query<{ json: string }>(
      `SELECT ${POSTGRES_STEP_JSON} AS json FROM steps s WHERE ${where} ORDER BY s.sequence`,
    );
    return { written, postgres: postgres.map((row) => row.json) };
  }

  it('when costs are exact, tiny, huge, negative or not numbers, then each is written as trim_scale writes it (null for NaN and infinities)', async () => {
    const { written, postgres } = await both(await insert(COSTS.map((cost) => ({ cost_usd: cost }))));
    expect(written).toEqual(postgres);
    expect(written.map((json) => JSON.parse(json).cost_usd)).toEqual(
      COSTS.map((cost) => (cost === null || /NaN|Infinity/.test(cost) ? null : Number(cost))),
    );
    expect(written[4]).toContain('"cost_usd":12345.6789,');
    expect(written[8]).toContain('"cost_usd":99999999999999999999.9999,');
  });

  it('when text needs escaping, then it is escaped as to_json escapes it, and the rest goes as it is', async () => {
    const { written, postgres } = await both(
      await insert([
        { model: ODD_TEXT, tool_name: '', type: 'TOOL_CALL' },
        { model: null, tool_name: 'a"b\\c\nd\te', status: 'FAILED' },
      ]),
    );
    expect(written).toEqual(postgres);
    expect(JSON.parse(written[0]!).model).toBe(ODD_TEXT);
    expect(JSON.parse(written[1]!)).toMatchObject({ model: null, tool_name: 'a"b\\c\nd\te', status: 'FAILED' });
  });

  it("when counts reach past 2^53 and to int8's ends, then their digits are exact", async () => {
    const { written, postgres } = await both(
      await insert(
        INTEGERS.map((n) => ({
          prompt_tokens: n,
          completion_tokens: n,
          cached_prompt_tokens: n,
          cache_write_tokens: n,
          reasoning_tokens: n,
          duration_ms: n,
        })),
      ),
    );
    expect(written).toEqual(postgres);
    expect(written[5]).toContain('"prompt_tokens":9223372036854775807,');
  });

  it('when caller data is json, legacy jsonb or none, then it goes as stored', async () => {
    const input = '{ "zz": 1,  "a": [1.50, "é\\u0001"] }'; // json keeps the caller's text, spaces included
    const { written, postgres } = await both(
      await insert([
        { input_json: input, output_json: '[]' },
        { input_data: input, output_data: '{"b": {}, "a": null}' },
        {
          input_json: null,
          input_data: null,
          output_json: null,
          output_data: null,
          decision: '{"outcome":"DENY","reason":"USER_BLOCKED"}',
        },
      ]),
    );
    expect(written).toEqual(postgres);
    expect(written[0]).toContain(`"input_data":${input},`);
  });

  it('when dates lie in years 1 to 9999, then they are written as Postgres and toISOString write them; infinities as null', async () => {
    const inRange = DATES.filter((date) => !/^(2285|1700)/.test(date));
    const { written, postgres } = await both(await insert(inRange.map((date) => ({ created_at: date }))));
    expect(written).toEqual(postgres);
    expect(written.map((json) => JSON.parse(json).created_at)).toEqual([
      '2026-03-01T12:00:00.999Z',
      '1999-12-31T23:59:59.999Z',
      '1970-01-01T00:00:00.000Z',
      '1969-12-31T23:59:59.000Z',
      '0001-01-01T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
      '2026-03-01T11:00:00.000Z',
      null,
      null,
    ]);
  });

  it('when dates lie past 2^53 microseconds from 2000, then they are still cut to the millisecond', async () => {
    const { written, postgres } = await both(
      await insert(
        ['2285-06-01 00:00:00.0015+00', '1700-01-01 00:00:00.0015+00'].map((date) => ({ created_at: date })),
      ),
    );
    expect(written).toEqual(postgres);
    expect(written.map((json) => JSON.parse(json).created_at)).toEqual([
      '2285-06-01T00:00:00.001Z',
      '1700-01-01T00:00:00.001Z',
    ]);
  });

  it('when many steps, the largest for their bytes among them, fill block after block, then each lands whole', async () => {
    // Empty type and status, every nullable column NULL and the integers at their longest: the
    // most a step writes past its own bytes (the room writeStep makes for it has no slack here).
    const widest = {
      type: '',
      status: '',
      model: null,
      tool_name: null,
      decision: '{}',
      created_at: '275760-09-13 00:00:00+00',
      prompt_tokens: '-9223372036854775808',
      completion_tokens: '-9223372036854775808',
      cached_prompt_tokens: '-9223372036854775808',
      cache_write_tokens: '-9223372036854775808',
      reasoning_tokens: '-9223372036854775808',
      duration_ms: '-9223372036854775808',
    };
    const sequences = await insert(
      Array.from({ length: 300 }, (_, n) =>
        n % 3 === 0
          ? { ...widest, sequence: String(-2147483648 + n) }
          : {
              model: ODD_TEXT.repeat(n % 7),
              input_json: JSON.stringify({ n, s: 'x'.repeat(n * 10) }),
              cost_usd: COSTS[n % COSTS.length]!,
            },
      ),
    );
    const where = `s.run_id = '${runId}' AND s.sequence IN (${sequences.join(', ')})`;
    const rows = binaryCopyRows(
      await db.copyOut(`SELECT ${STEP_COLUMNS.join(', ')} FROM steps s WHERE ${where} ORDER BY s.sequence`),
    );
    const out = new JsonBytes(0); // blocks of 4 KiB, then 64 KiB; the widest steps come first
    for (let r = 0; r < rows.length; r++) writeStep(out, rows, r, 0);
    expect(out.blocks().length).toBeGreaterThan(3);
    const { rows: written } = await db.query<{ json: string }>(
      `SELECT ${POSTGRES_STEP_JSON} AS json FROM steps s WHERE ${where} ORDER BY s.sequence`,
    );
    // Past year 9999 to_char writes no valid date; the widest steps' date as toISOString writes it.
    const postgres = written.map((row) => row.json.replace('"275760-09-13T', '"+275760-09-13T'));
    expect(Buffer.concat(out.blocks()).toString('utf8')).toBe(postgres.join(''));
    // The widest step at every distance from a block's end: where the room it asks for is all
    // that is left, a byte too few would throw (or, unchecked, cut the step).
    const filler = Buffer.alloc(4096, 0x20);
    for (let left = 0; left <= 1024; left++) {
      const block = new JsonBytes(4096);
      block.bytes(filler, 0, 4096 - left);
      writeStep(block, rows, 0, 0);
      expect(
        Buffer.concat(block.blocks())
          .subarray(4096 - left)
          .toString('utf8'),
      ).toBe(postgres[0]);
    }
  });

  it('when a date lies past year 9999, then it is written as toISOString writes it (Postgres would write no valid date)', async () => {
    // The last two share a day: the one past a JavaScript date's last millisecond is null all the same.
    const { written } = await both(
      await insert(
        [
          '20000-01-01 00:00:00.25+00',
          '294276-12-31 23:59:59+00',
          '275760-09-13 00:00:00+00',
          '275760-09-13 00:00:00.001+00',
        ].map((date) => ({ created_at: date })),
      ),
    );
    expect(written.map((json) => JSON.parse(json).created_at)).toEqual([
      '+020000-01-01T00:00:00.250Z',
      null,
      '+275760-09-13T00:00:00.000Z',
      null,
    ]);
  });
});
