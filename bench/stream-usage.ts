/**
 * What reading a streamed answer's usage costs the daemon per stream: the OpenAI adapter's
 * tracker fed a chat stream of 500 deltas and a usage chunk (as `include_usage` makes OpenAI send
 * them, `"usage":null` in every delta), against a baseline in the same process that owes nothing
 * to our code: `JSON.parse` of every event's data, split beforehand (what a reader that parses
 * each event pays at least). Alternating rounds; the ratio is the figure.
 *
 *   npx tsx bench/stream-usage.ts [--deltas 500] [--rounds 4]
 */
import { parseArgs } from 'node:util';
import { adapterFor } from '../src/proxy/providers/index.js';

const { values: flags } = parseArgs({ options: { deltas: { type: 'string', default: '500' }, rounds: { type: 'string', default: '4' } } });
const head = { id: 'chatcmpl-AbC123xyz', object: 'chat.completion.chunk', created: 1763900000, model: 'gpt-4o-mini-2024-07-18', system_fingerprint: 'fp_0ba0d124f1' };
const events = Array.from({ length: Number(flags.deltas) }, (_, i) =>
  ({ ...head, choices: [{ index: 0, delta: { content: ` word${i}` }, logprobs: null, finish_reason: null }], usage: null }));
events.push({ ...head, choices: [], usage: { prompt_tokens: 10, completion_tokens: events.length, total_tokens: events.length + 10 } } as never);
// One network chunk per event, as the upstream flushes them.
const chunks = [...events.map((e) => Buffer.from(`data: ${JSON.stringify(e)}\n\n`)), Buffer.from('data: [DONE]\n\n')];

const adapter = adapterFor('openai');
const tracked = (): number => {
  const tracker = adapter.usageTracker('/v1/chat/completions', 'text/event-stream');
  for (const chunk of chunks) tracker.push(chunk);
  return tracker.end().completionTokens ?? -1;
};
const datas = events.map((e) => JSON.stringify(e));
const parsedAll = (): number => {
  let last = -1;
  for (const data of datas) {
    const usage = (JSON.parse(data) as { usage?: { completion_tokens?: number } | null }).usage;
    if (usage) last = usage.completion_tokens ?? -1;
  }
  return last;
};
if (tracked() !== events.length - 1 || parsedAll() !== events.length - 1) throw new Error('usage not read');

const perStreamUs = (run: () => number, n: number): number => {
  const started = performance.now();
  for (let i = 0; i < n; i++) run();
  return ((performance.now() - started) / n) * 1000;
};
for (let i = 0; i < 300; i++) { tracked(); parsedAll(); } // JIT warm-up
for (let round = 1; round <= Number(flags.rounds); round++) {
  const baseline = perStreamUs(parsedAll, 300);
  const tracker = perStreamUs(tracked, 300);
  console.log(`round ${round}: ${chunks.length} events per stream; every event's data parsed ${baseline.toFixed(0)} µs, ` +
    `the tracker ${tracker.toFixed(0)} µs (x${(tracker / baseline).toFixed(3)} of the baseline)`);
}
