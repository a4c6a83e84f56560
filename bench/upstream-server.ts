/** The fake OpenAI upstream in a process of its own, so it never shares an event loop with the load. */
import { startFakeUpstream } from '../test/support/fake-upstream.js';

const delayMs = Number(process.argv[2] ?? 10);
const chunkDelayMs = Number(process.argv[3] ?? 0);
const upstream = await startFakeUpstream({ delayMs, chunkDelayMs });
// Recording every request would grow without bound under load.
upstream.requests.push = () => 0;
process.stdout.write(`READY ${upstream.url}\n`);
process.on('SIGTERM', () => void upstream.close().finally(() => process.exit(0)));
