/** `runguard usage report` (issue #51, item 6): a table, JSON, or the daemon's CSV; bad input refused. */
import { describe, expect, it } from 'vitest';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;

const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);

describe('usage report from the CLI', () => {
  it('when calls were made, then the CSV has one line per user and its totals are the JSON total', async () => {
    const { api } = fixture;
    expect(
      (
        await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
          input_cost_per_token: 0.0000013,
          output_cost_per_token: 0.0000071,
        })
      ).status,
    ).toBe(200);
    for (const [sequence, user] of ['ana', 'bo'].entries()) {
      const tags = user === 'ana' ? { project: 'search' } : {};
      const run = (await api.request('POST', '/v1/runs', { user_id: user, tags })).body;
      const step = (
        await api.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'MODEL_CALL',
          model: 'gpt-4o-mini',
          tool_name: null,
          sequence: sequence + 1,
        })
      ).body;
      await api.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 100 + sequence,
        completion_tokens: 33,
      });
    }
    // Yesterday to tomorrow: the calls are inside whatever the daemon's clock says today is.
    const range = ['--from', day(-1), '--to', day(1), '--group-by', 'user'];
    // Reads of the same records: all at once.
    const [csv, asJson, table, byTag] = await Promise.all([
      cli('usage', 'report', ...range, '--csv'),
      cli('usage', 'report', ...range, '--json'),
      cli('usage', 'report', ...range),
      cli('usage', 'report', '--from', day(-1), '--to', day(1), '--group-by', 'tag:project', '--json'),
    ]);
    expect(csv.code).toBe(0);
    const lines = csv.stdout.trimEnd().split('\r\n');
    expect(lines[0]).toBe('key,spend_usd,tokens,calls,unpriced_calls');
    expect(
      lines
        .slice(1)
        .map((line) => line.split(',')[0])
        .sort(),
    ).toEqual(['ana', 'bo']);
    const json = JSON.parse(asJson.stdout);
    const csvMicros = lines.slice(1).reduce((sum, line) => sum + Math.round(Number(line.split(',')[1]) * 1e6), 0);
    expect(csvMicros).toBe(Math.round(json.total.spend_usd * 1e6));
    expect(json.total).toMatchObject({ tokens: 100 + 101 + 66, calls: 2, unpriced_calls: 0 });
    expect(table.stdout).toMatch(/^TOTAL\s+\$0\.00073\s+267\s+2\s+0$/m);
    // By a tag: ana's run carries project=search, bo's none (the row whose key is null, first: it spent more).
    expect(JSON.parse(byTag.stdout).rows.map((row: { key: string | null }) => row.key)).toEqual([null, 'search']);
  });

  it('when the group is unknown, then the command fails naming group_by', async () => {
    const refused = await cli('usage', 'report', '--from', day(0), '--to', day(0), '--group-by', 'colour');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('group_by');
  });
});
