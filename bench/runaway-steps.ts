/**
 * What a configured runaway rule costs a step (docs/limits.md): sequential step creations through
 * the run API on Postgres + Redis and Postgres alone, in a workspace without the rules, with a
 * run limit (max_steps), and with a user rate. Prints p50 and p90 per setting.
 *
 *   npx tsx bench/runaway-steps.ts [steps per setting, default 400]
 */
import { startTestApi, type Backend } from '../test/support/harness.js';

const STEPS = Number(process.argv[2] ?? 400);

const percentile = (sorted: number[], share: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * share))]!;

async function measure(backend: Backend): Promise<void> {
  const api = await startTestApi(backend);
  try {
    const settings: [string, Record<string, unknown>, Record<string, unknown>][] = [
      ['no runaway rule', {}, {}],
      ['max_steps (run lock)', {}, { max_steps: STEPS * 10 }],
      ['user_steps_per_minute', { user_steps_per_minute: STEPS * 10 }, {}],
      [
        'all four',
        { user_steps_per_minute: STEPS * 10 },
        { max_steps: STEPS * 10, max_cost_usd: 1000, max_identical_calls: 5 },
      ],
    ];
    for (const [name, workspace, limits] of settings) {
      const { api: ws } = await api.newWorkspace();
      await ws.request('PATCH', '/v1/workspace', workspace);
      const run = (await ws.request('POST', '/v1/runs', { user_id: 'bench', limits })).body as { id: string };
      const times: number[] = [];
      for (let sequence = 1; sequence <= STEPS; sequence++) {
        const started = performance.now();
        const step = await ws.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'TOOL_CALL',
          tool_name: 'search',
          sequence,
          input_data: { sequence },
        });
        if (step.status !== 201 || (step.body as { status?: string }).status !== 'ALLOWED')
          throw new Error(JSON.stringify(step.body));
        if (sequence > 20) times.push(performance.now() - started);
      }
      times.sort((a, b) => a - b);
      console.log(
        `${backend.padEnd(15)} ${name.padEnd(24)} p50 ${percentile(times, 0.5).toFixed(2)} ms  p90 ${percentile(times, 0.9).toFixed(2)} ms`,
      );
    }
  } finally {
    await api.close();
  }
}

for (const backend of ['postgres+redis', 'postgres+sql'] as Backend[]) await measure(backend);
