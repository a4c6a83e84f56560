/**
 * What asking a streamed chat for its usage costs the daemon on a large request: a 4 MB chat
 * (200 turns and an image as a data URL), rewritten with `stream_options.include_usage` as the
 * proxy sends it upstream, against a baseline in the same process: `JSON.parse` of the request,
 * which the proxy pays anyway to read the model. The re-serialisation it replaced is timed too.
 *
 *   npx tsx bench/request-rewrite.ts [--rounds 4]
 */
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { rewrittenBytes } from '../src/proxy/json-rewrite.js';
import { adapterFor } from '../src/proxy/providers/index.js';
import { msPerCall } from './lib/stats.js';

const { values: flags } = parseArgs({ options: { rounds: { type: 'string', default: '4' } } });
const image = `data:image/png;base64,${Buffer.alloc(3_000_000, 7).toString('base64')}`;
const turns = Array.from({ length: 200 }, (_, i) => ({
  role: i % 2 ? 'assistant' : 'user',
  content: 'Some earlier turn of the conversation, a sentence or two long. '.repeat(8),
}));
const raw = Buffer.from(
  JSON.stringify({
    model: 'gpt-4o',
    stream: true,
    messages: [
      ...turns,
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in this image?' },
          { type: 'image_url', image_url: { url: image } },
        ],
      },
    ],
  }),
);
const parsed: unknown = JSON.parse(raw.toString('utf8'));
const { rewrittenBody } = adapterFor('openai').inspectRequest('/v1/chat/completions', parsed);
if (rewrittenBody === undefined) throw new Error('no rewrite');
if (!isDeepStrictEqual(JSON.parse(rewrittenBytes(raw, parsed, rewrittenBody).toString()), rewrittenBody)) {
  throw new Error('the spliced body differs');
}

const parse = (): unknown => JSON.parse(raw.toString('utf8'));
const spliced = () => rewrittenBytes(raw, parsed, rewrittenBody);
const serialised = () => Buffer.from(JSON.stringify(rewrittenBody));
for (let i = 0; i < 10; i++) {
  parse();
  spliced();
  serialised();
} // JIT warm-up
for (let round = 1; round <= Number(flags.rounds); round++) {
  const baseline = msPerCall(parse, 20);
  const splice = msPerCall(spliced, 20);
  const whole = msPerCall(serialised, 20);
  console.log(
    `${(raw.length / 1e6).toFixed(1)} MB request, round ${round}: JSON.parse ${baseline.toFixed(2)} ms; ` +
      `the rewrite spliced ${splice.toFixed(2)} ms (x${(splice / baseline).toFixed(3)}), serialised whole ${whole.toFixed(2)} ms (x${(whole / baseline).toFixed(3)})`,
  );
}
