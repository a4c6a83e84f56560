/**
 * A run detail is written as JSON text by Postgres (readRunDetail), not by the response schema's
 * serializer: these hold the answer to the schema's shape, and pin the formats of values that
 * could drift (sub-millisecond timestamps, costs of many digits or below a micro-dollar, caller
 * JSON, strings that need escaping), on every backend.
 */
import fastJson from 'fast-json-stringify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunDetail } from '../../src/api/schemas.js';
import { DETAIL_PAGES, readRunDetail, type RunDetailBody } from '../../src/store/run-detail.js';
import { BACKENDS, startTestApi, type TestApi } from '../support/harness.js';

const schemaSerializer = fastJson(RunDetail as object);

/** A run detail's answer as text, whichever form readRunDetail gave it in. */
async function textOf(detail: RunDetailBody | null): Promise<string> {
  if (detail === null) throw new Error('no such run');
  const pieces: Buffer[] = [];
  for await (const piece of detail) pieces.push(piece);
  return Buffer.concat(pieces).toString('utf8');
}

describe.each(BACKENDS)('run detail on %s', (backend) => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi(backend);
  });
  afterAll(async () => {
    await api?.close();
  });

  /** A run with steps written straight to the table: values the API would not produce on its own. */
  async function seededRun(
    steps: {
      createdAt: string;
      cost: string | null;
      input: unknown;
      output: unknown;
      status?: string;
      model?: string;
      /** Caller data in the jsonb columns that steps written before migration 5 use. */
      legacy?: boolean;
    }[],
  ) {
    const started = await api.request('POST', '/v1/runs/', { user_id: 'detail', metadata: { b: 1, a: [1.5, 'x'] } });
    expect(started.status).toBe(201);
    const runId = started.body.id as string;
    for (const [i, s] of steps.entries()) {
      await api.stores.db.query(
        `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, tool_name, prompt_tokens, completion_tokens,
           cached_prompt_tokens, cost_usd, duration_ms, ${s.legacy ? 'input_data, output_data' : 'input_json, output_json'}, decision, created_at)
         VALUES (gen_random_uuid(), $1, $2, $3, 'MODEL_CALL', $4, $10, NULL, 1234567, 0, NULL, $5, 12, $6, $7, $8, $9)`,
        [
          runId,
          api.workspaceId,
          i + 1,
          s.status ?? 'COMPLETED',
          s.cost,
          JSON.stringify(s.input),
          JSON.stringify(s.output),
          JSON.stringify({
            outcome: 'DENY',
            reason: 'USER_BLOCKED',
            evaluated_rules: { kill_switch: 'PASS', user_blocked: 'DENY' },
          }),
          s.createdAt,
          s.model ?? 'm',
        ],
      );
    }
    // As a run from before migration 6, which kept no totals: the read sums its steps.
    await api.stores.db.query('UPDATE runs SET step_count = NULL WHERE id = $1', [runId]);
    return runId;
  }

  it("when steps carry odd timestamps, costs, caller JSON and strings, then the answer has the schema's shape and exact costs", async () => {
    const runId = await seededRun([
      {
        createdAt: '2026-03-01 12:00:00.999999+00',
        cost: '0.00000015',
        input: { z: 1, a: { n: 1e-7, big: 1e21, s: 'é"\\\n\u0001' } },
        output: null,
      },
      {
        createdAt: '2026-03-01 12:00:01.000001+00',
        cost: '0.000123456789012345678901',
        input: null,
        output: { arr: [1, 2.5, true, null] },
        model: 'gpt "4o"\\\n\u0007é',
      },
      { createdAt: '1999-12-31 23:59:59.9995+00', cost: '0', input: {}, output: {} },
      {
        createdAt: '2026-03-01 13:00:00+02',
        cost: null,
        input: { prompt: 'Step ' + 'x'.repeat(300) },
        output: { finish_reason: 'stop' },
      },
      {
        createdAt: '2026-03-01 12:00:02.12+00',
        cost: '12345.678900',
        input: { k: 0.1 },
        output: { k: -0 },
        status: 'BLOCKED',
      },
    ]);
    const res = await fetch(`${api.url}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${api.apiKey}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const text = await res.text();
    const body = JSON.parse(text);
    // The schema's serializer drops keys the schema lacks and coerces mistyped values.
    expect(JSON.parse(schemaSerializer(body))).toEqual(body);

    expect(body.steps.map((s: { created_at: string }) => s.created_at)).toEqual([
      '2026-03-01T12:00:00.999Z',
      '2026-03-01T12:00:01.000Z',
      '1999-12-31T23:59:59.999Z',
      '2026-03-01T11:00:00.000Z',
      '2026-03-01T12:00:02.120Z',
    ]);
    expect(body.steps.map((s: { cost_usd: number | null }) => s.cost_usd)).toEqual([
      1.5e-7,
      0.00012345678901234568,
      0,
      null,
      12345.6789,
    ]);
    // Costs as numeric writes them, trailing zeros dropped: exact, not rounded to a double.
    expect(text).toContain('"cost_usd":0.00000015,');
    expect(text).toContain('"cost_usd":0.000123456789012345678901,');
    expect(text).toContain('"cost_usd":12345.6789,');
    expect(body.steps[1].model).toBe('gpt "4o"\\\n\u0007é');
    expect(body.steps[0].input_data).toEqual({ z: 1, a: { n: 1e-7, big: 1e21, s: 'é"\\\n\u0001' } });
    expect(body.steps[1].output_data).toEqual({ arr: [1, 2.5, true, null] });
    expect(body.steps[0].decision).toEqual({
      outcome: 'DENY',
      reason: 'USER_BLOCKED',
      evaluated_rules: { kill_switch: 'PASS', user_blocked: 'DENY' },
    });
    expect(body.steps[0].prompt_tokens).toBe(1234567);
    expect(body).toMatchObject({ step_count: 5, total_tokens: 5 * 1234567, metadata: { b: 1, a: [1.5, 'x'] } });
    expect(Object.keys(body.steps[0])).toEqual(Object.keys(RunDetail.properties.steps.items.properties));
    expect(Object.keys(body)).toEqual(Object.keys(RunDetail.properties));
  });

  it("when steps were written before migration 5 (caller data in jsonb), then their data reads as the others'", async () => {
    const input = { zz: 1, a: { s: 'é"\\\n', n: [1, 2.5, null] } };
    const output = { finish_reason: 'stop', usage: { total: 7 } };
    const runId = await seededRun([
      { createdAt: '2026-03-01 12:00:00+00', cost: null, input, output },
      { createdAt: '2026-03-01 12:00:01+00', cost: null, input, output, legacy: true },
      { createdAt: '2026-03-01 12:00:02+00', cost: null, input: null, output: null, legacy: true },
      { createdAt: '2026-03-01 12:00:03+00', cost: null, input: null, output: null },
    ]);
    const res = await api.request('GET', `/v1/runs/${runId}`);
    expect(res.status).toBe(200);
    expect(
      res.body.steps.map((s: { input_data: unknown; output_data: unknown }) => [s.input_data, s.output_data]),
    ).toEqual([
      [input, output],
      [input, output],
      [null, null],
      [null, null],
    ]);
  });

  it("when a step is written and finished through the API, then its caller data keeps the caller's key order", async () => {
    const started = await api.request('POST', '/v1/runs/', { user_id: 'detail-order' });
    const runId = started.body.id as string;
    // jsonb would write these keys shortest first: `a` before `zz`.
    const step = await api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'TOOL_CALL',
      sequence: 1,
      tool_name: 't',
      input_data: { zz: 1, a: { yy: 2, b: 3 } },
    });
    expect(step.status).toBe(201);
    const patched = await api.request('PATCH', `/v1/runs/${runId}/steps/${step.body.id}`, {
      status: 'COMPLETED',
      output_data: { zz: [1], a: 'x' },
    });
    expect(patched.status).toBe(200);
    const res = await fetch(`${api.url}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${api.apiKey}` } });
    const text = await res.text();
    expect(text).toContain('"input_data":{"zz":1,"a":{"yy":2,"b":3}},"output_data":{"zz":[1],"a":"x"},');
  });

  it('when the session is not on UTC, then step dates are still written in UTC', async () => {
    const runId = await seededRun([
      { createdAt: '2026-03-01 12:00:00.123456+00', cost: null, input: null, output: null },
      { createdAt: '2026-03-01 23:59:59.9995-05', cost: null, input: null, output: null },
    ]);
    // Postgres writes the dates: a session time zone (a half-hour one, here) must not reach them.
    const detail = await api.stores.db.transaction(async (tx) => {
      await tx.query("SET LOCAL TimeZone = 'America/St_Johns'");
      return textOf(await readRunDetail(tx, api.workspaceId, runId, new Date()));
    });
    expect(JSON.parse(detail).steps.map((s: { created_at: string }) => s.created_at)).toEqual([
      '2026-03-01T12:00:00.123Z',
      '2026-03-02T04:59:59.999Z',
    ]);
  });

  it('when a RUNNING run is read, then duration_ms runs to the given now, each end cut to the millisecond as a JavaScript date is', async () => {
    const runId = await seededRun([]);
    await api.stores.db.query(`UPDATE runs SET started_at = '2026-03-01 12:00:00.9996+00' WHERE id = $1`, [runId]);
    const read = async (now: string) =>
      JSON.parse(await textOf(await readRunDetail(api.stores.db, api.workspaceId, runId, new Date(now))));
    expect(await read('2026-03-01T12:00:01.500Z')).toMatchObject({
      status: 'RUNNING',
      started_at: '2026-03-01T12:00:00.999Z',
      ended_at: null,
      duration_ms: 501,
    });
    // A clock behind the start reads 0, not a negative duration.
    expect((await read('2026-03-01T11:00:00.000Z')).duration_ms).toBe(0);
    await api.stores.db.query(
      `UPDATE runs SET status = 'COMPLETED', ended_at = '2026-03-02 12:00:00.0004+00' WHERE id = $1`,
      [runId],
    );
    expect(await read('2030-01-01T00:00:00.000Z')).toMatchObject({
      ended_at: '2026-03-02T12:00:00.000Z',
      duration_ms: 86_399_001,
    });
  });

  it("when a one-page run is read, then its length is the body's, and HEAD answers the same length", async () => {
    const runId = await seededRun([
      { createdAt: '2026-03-01 12:00:00+00', cost: '0.5', input: { s: 'é✓😀' }, output: null },
    ]);
    // Ended: a RUNNING run's duration, and so its length, grows between two reads.
    await api.stores.db.query(
      `UPDATE runs SET status = 'COMPLETED', ended_at = started_at + interval '1 second' WHERE id = $1`,
      [runId],
    );
    const headers = { authorization: `Bearer ${api.apiKey}` };
    const get = await fetch(`${api.url}/v1/runs/${runId}`, { headers });
    const bytes = Buffer.from(await get.arrayBuffer());
    expect(Number(get.headers.get('content-length'))).toBe(bytes.length);
    expect(JSON.parse(bytes.toString('utf8')).steps[0].input_data).toEqual({ s: 'é✓😀' });
    const head = await fetch(`${api.url}/v1/runs/${runId}`, { method: 'HEAD', headers });
    expect(head.headers.get('content-length')).toBe(String(bytes.length));
  });

  it('when a run has no steps, then steps is [] and its decision keeps only the schema keys', async () => {
    const runId = await seededRun([]);
    const res = await api.request('GET', `/v1/runs/${runId}`);
    expect(res.status).toBe(200);
    expect(res.body.steps).toEqual([]);
    expect(res.body).toMatchObject({ step_count: 0, total_tokens: 0, total_cost_usd: 0, status: 'RUNNING' });
    expect(Object.keys(res.body.decision)).toEqual(['outcome', 'reason', 'evaluated_rules']);
  });

  /**
   * A run of `count` MODEL_CALL steps, sequences 1 to `count`, written straight to the table;
   * `descending`: the highest sequence first, so that the table's order is not the answer's.
   */
  async function runOfSteps(count: number, descending = false) {
    const started = await api.request('POST', '/v1/runs/', { user_id: 'detail-pages' });
    expect(started.status).toBe(201);
    const runId = started.body.id as string;
    await api.stores.db.query(
      `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, prompt_tokens, completion_tokens, cost_usd,
         input_data, decision, created_at)
       SELECT gen_random_uuid(), $1, $2, n, 'MODEL_CALL', 'COMPLETED', 'm', 2, 3, 0.000001, jsonb_build_object('n', n),
         '{"outcome":"ALLOW","reason":null,"evaluated_rules":{"kill_switch":"PASS"}}', now()
       FROM generate_series(1, $3::int) n ORDER BY n ${descending ? 'DESC' : 'ASC'}`,
      [runId, api.workspaceId, count],
    );
    // The totals, as the daemon's writes keep them.
    await api.stores.db.query('UPDATE runs SET step_count = $2 WHERE id = $1', [runId, count]);
    await api.stores.db.query('INSERT INTO run_totals VALUES ($1, $2, $3)', [
      runId,
      5 * count,
      (0.000001 * count).toFixed(6),
    ]);
    return runId;
  }

  it('when steps were written highest sequence first, then one page and many pages list them in sequence order', async () => {
    const runId = await runOfSteps(7, true);
    // Without the index on (run_id, sequence) the steps come in the table's order: the statement's
    // own ORDER BY must put them in sequence order.
    const texts = await api.stores.db.transaction(async (tx) => {
      await tx.query('SET LOCAL enable_indexscan = off');
      await tx.query('SET LOCAL enable_bitmapscan = off');
      const whole = await readRunDetail(tx, api.workspaceId, runId, new Date(), { first: 10, later: 10 });
      // Read before the transaction ends: later pages run on it.
      const paged = await readRunDetail(tx, api.workspaceId, runId, new Date(), { first: 2, later: 3 });
      return [await textOf(whole), await textOf(paged)];
    });
    for (const text of texts) {
      const body = JSON.parse(text);
      expect(body.steps.map((s: { sequence: number }) => s.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(body.steps.map((s: { input_data: { n: number } }) => s.input_data.n)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    }
  });

  it.each([DETAIL_PAGES.first, DETAIL_PAGES.first + 1, DETAIL_PAGES.first + 15 * DETAIL_PAGES.later + 50])(
    'when a run has %i steps, then every one is listed once, in order, and as many as step_count',
    async (count) => {
      const runId = await runOfSteps(count);
      const res = await fetch(`${api.url}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${api.apiKey}` } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      // One page goes as one string; more are sent as they are read.
      expect(res.headers.get('content-length') === null).toBe(count > DETAIL_PAGES.first);
      const body = await res.json();
      expect(body).toMatchObject({ step_count: count, total_tokens: 5 * count });
      expect(body.steps.map((s: { sequence: number }) => s.sequence)).toEqual(
        Array.from({ length: count }, (_, i) => i + 1),
      );
      expect(body.steps.map((s: { input_data: { n: number } }) => s.input_data.n)).toEqual(
        Array.from({ length: count }, (_, i) => i + 1),
      );
      expect(JSON.parse(schemaSerializer(body))).toEqual(body);
    },
  );

  it("when a run's step count is short (steps a daemon from before migration 6 wrote), then every step is still listed", async () => {
    const count = DETAIL_PAGES.first + 2 * DETAIL_PAGES.later + 7;
    const runId = await runOfSteps(count);
    await api.stores.db.query('UPDATE runs SET step_count = 3 WHERE id = $1', [runId]);
    const res = await fetch(`${api.url}/v1/runs/${runId}`, { headers: { authorization: `Bearer ${api.apiKey}` } });
    const body = await res.json();
    expect(body.step_count).toBe(3);
    expect(body.steps.map((s: { sequence: number }) => s.sequence)).toEqual(
      Array.from({ length: count }, (_, i) => i + 1),
    );
  });

  it('when steps are written while a paged run is read, then the answer lists the steps its first read counted', async () => {
    const runId = await runOfSteps(5);
    const detail = await readRunDetail(api.stores.db, api.workspaceId, runId, new Date(), { first: 2, later: 2 });
    expect(Array.isArray(detail)).toBe(false);
    const pieces: Buffer[] = [];
    for await (const piece of detail!) {
      if (pieces.length === 0) {
        // After the first page, two steps past the last one the first read counted.
        await api.stores.db.query(
          `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, decision, created_at)
           SELECT gen_random_uuid(), $1, $2, n, 'TOOL_CALL', 'ALLOWED', '{"outcome":"ALLOW","reason":null,"evaluated_rules":{}}', now()
           FROM unnest(ARRAY[6, 100]) n`,
          [runId, api.workspaceId],
        );
      }
      pieces.push(piece);
    }
    expect(pieces.length).toBe(4); // the head with the first page, two more pages, the close
    const body = JSON.parse(Buffer.concat(pieces).toString());
    expect(body.step_count).toBe(5);
    expect(body.steps.map((s: { sequence: number }) => s.sequence)).toEqual([1, 2, 3, 4, 5]);
  });

  /**
   * Counts the statements that read a run detail's steps while `fn` runs (others, such as an API
   * key's last use, may come at any time), and fails the ones `fail` picks.
   */
  async function watchingQueries<T>(fn: () => Promise<T>, fail: (query: string) => boolean = () => false) {
    const db = api.stores.db;
    const original = db.query;
    let statements = 0;
    db.query = (async (query: string, params?: readonly unknown[]) => {
      if (query.includes('string_agg(')) statements++;
      if (fail(query))
        throw Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
      return original.call(db, query, params);
    }) as typeof db.query;
    try {
      const result = await fn();
      return { result, statements };
    } finally {
      db.query = original;
    }
  }

  it('when a paged run is asked with HEAD, then it answers 200 and reads no page past the first', async () => {
    const runId = await runOfSteps(DETAIL_PAGES.first + 1);
    const { result: res, statements } = await watchingQueries(() =>
      fetch(`${api.url}/v1/runs/${runId}`, { method: 'HEAD', headers: { authorization: `Bearer ${api.apiKey}` } }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    await new Promise((resolve) => setTimeout(resolve, 200)); // a page read after the answer would land here
    expect(statements).toBe(1);
  });

  it('when a later page fails, then the answer is cut, and the next read is whole', async () => {
    const runId = await runOfSteps(DETAIL_PAGES.first + 1);
    const headers = { authorization: `Bearer ${api.apiKey}` };
    // A later page's statement is the only one that starts past a given sequence.
    const { result: read } = await watchingQueries(
      async () => {
        const res = await fetch(`${api.url}/v1/runs/${runId}`, { headers });
        return {
          status: res.status,
          text: await res.text().then(
            () => 'whole',
            (error: Error) => error.message,
          ),
        };
      },
      (query) => query.includes('sequence > $2'),
    );
    // The status went with the first page: a cut answer is all that is left to say.
    expect(read).toEqual({ status: 200, text: 'terminated' });
    const again = await fetch(`${api.url}/v1/runs/${runId}`, { headers });
    expect((await again.json()).steps).toHaveLength(DETAIL_PAGES.first + 1);
  });

  it('when a run or its steps hold an infinite date or a NaN cost, then they read as null and no page loses a step', async () => {
    const runId = await runOfSteps(5);
    await api.stores.db.query(
      `UPDATE steps SET created_at = CASE WHEN sequence <= 2 THEN 'infinity'::timestamptz ELSE created_at END,
         cost_usd = CASE WHEN sequence = 3 THEN 'NaN'::numeric ELSE cost_usd END WHERE run_id = $1`,
      [runId],
    );
    // The run's own start too: Postgres has no text for an infinite date, and concat would drop it.
    await api.stores.db.query(`UPDATE runs SET started_at = '-infinity' WHERE id = $1`, [runId]);
    const body = JSON.parse(
      await textOf(await readRunDetail(api.stores.db, api.workspaceId, runId, new Date(), { first: 2, later: 2 })),
    );
    expect(body).toMatchObject({ started_at: null, duration_ms: null });
    expect(body.steps.map((s: { sequence: number }) => s.sequence)).toEqual([1, 2, 3, 4, 5]);
    expect(body.steps.map((s: { created_at: string | null }) => s.created_at === null)).toEqual([
      true,
      true,
      false,
      false,
      false,
    ]);
    expect(body.steps[2].cost_usd).toBeNull();
    expect(body.steps[3].cost_usd).toBe(0.000001);
  });
});
