/**
 * What reading an answer's usage costs the daemon, per answer, for the two shapes that make it
 * work: a chat stream of 500 deltas and a usage chunk (as `include_usage` makes OpenAI send them,
 * `"usage":null` in every delta), and a 3 MB embeddings answer (100 vectors of 1,536), each fed
 * to the OpenAI adapter's tracker in network-sized chunks. Each is timed against a baseline in the
 * same process that owes nothing to our code: `JSON.parse` of every event's data, split
 * beforehand, and of the whole body. Alternating rounds; the ratio is the figure.
 *
 *   npx tsx bench/usage-reading.ts [--rounds 4]
 */
import { parseArgs } from 'node:util';
import { adapterFor } from '../src/proxy/providers/index.js';
import { msPerCall } from './lib/stats.js';

const { values: flags } = parseArgs({ options: { rounds: { type: 'string', default: '4' } } });
const openai = adapterFor('openai');

interface Case {
  name: string;
  /** What the tracker is fed, and the completion (stream) or prompt (JSON) tokens it must find. */
  chunks: Buffer[];
  path: string;
  contentType: string;
  tokens: number;
  usageOf: (u: { completionTokens: number | null; promptTokens: number | null }) => number | null;
  /** Calls per timed round. */
  repeats: number;
  /** The baseline: JSON.parse of the same data, with no decoding or copies. */
  baseline: () => number;
}

const head = {
  id: 'chatcmpl-AbC123xyz',
  object: 'chat.completion.chunk',
  created: 1763900000,
  model: 'gpt-4o-mini-2024-07-18',
  system_fingerprint: 'fp_0ba0d124f1',
};
const deltas: object[] = Array.from({ length: 500 }, (_, i) => ({
  ...head,
  choices: [{ index: 0, delta: { content: ` word${i}` }, logprobs: null, finish_reason: null }],
  usage: null,
}));
deltas.push({ ...head, choices: [], usage: { prompt_tokens: 10, completion_tokens: 500, total_tokens: 510 } });
const deltaTexts = deltas.map((d) => JSON.stringify(d));

const vectors = Array.from({ length: 100 }, (_, i) => ({
  object: 'embedding',
  index: i,
  embedding: Array.from({ length: 1536 }, (_, j) => Math.sin(i * 1536 + j) / 10),
}));
const embeddings = JSON.stringify({
  object: 'list',
  data: vectors,
  model: 'text-embedding-3-small',
  usage: { prompt_tokens: 800, total_tokens: 800 },
});
const embeddingsBytes = Buffer.from(embeddings);

const cases: Case[] = [
  {
    name: 'chat stream, 500 deltas',
    // One network chunk per event, as the upstream flushes them.
    chunks: [...deltaTexts.map((t) => Buffer.from(`data: ${t}\n\n`)), Buffer.from('data: [DONE]\n\n')],
    path: '/v1/chat/completions',
    contentType: 'text/event-stream',
    tokens: 500,
    usageOf: (u) => u.completionTokens,
    repeats: 300,
    baseline: () => {
      let last = -1;
      for (const text of deltaTexts) {
        const usage = (JSON.parse(text) as { usage?: { completion_tokens: number } | null }).usage;
        if (usage) last = usage.completion_tokens;
      }
      return last;
    },
  },
  {
    name: `embeddings, ${(embeddingsBytes.length / 1e6).toFixed(1)} MB`,
    chunks: Array.from({ length: Math.ceil(embeddingsBytes.length / 16384) }, (_, i) =>
      embeddingsBytes.subarray(i * 16384, (i + 1) * 16384),
    ),
    path: '/v1/embeddings',
    contentType: 'application/json',
    tokens: 800,
    usageOf: (u) => u.promptTokens,
    repeats: 20,
    baseline: () => (JSON.parse(embeddings) as { usage: { prompt_tokens: number } }).usage.prompt_tokens,
  },
];

const tracked = (c: Case): number | null => {
  const tracker = openai.usageTracker(c.path, c.contentType);
  for (const chunk of c.chunks) tracker.push(chunk);
  return c.usageOf(tracker.end());
};

for (const c of cases) {
  if (tracked(c) !== c.tokens || c.baseline() !== c.tokens) throw new Error(`${c.name}: usage not read`);
  for (let i = 0; i < c.repeats; i++) {
    tracked(c);
    c.baseline();
  } // JIT warm-up
  for (let round = 1; round <= Number(flags.rounds); round++) {
    const baseline = msPerCall(c.baseline, c.repeats) * 1000;
    const tracker = msPerCall(() => tracked(c), c.repeats) * 1000;
    console.log(
      `${c.name}, round ${round}: JSON.parse of it all ${baseline.toFixed(0)} µs, ` +
        `the tracker ${tracker.toFixed(0)} µs (x${(tracker / baseline).toFixed(3)} of the baseline)`,
    );
  }
}
