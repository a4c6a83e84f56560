/** The fake OpenAI upstream in a process of its own, so it never shares an event loop with the load. */
import { startFakeUpstream } from '../test/support/fake-upstream.js';

const delayMs = Number(process.argv[2] ?? 10);
const chunkDelayMs = Number(process.argv[3] ?? 0);
// A provider keeps idle connections for a while; Node's 5 s would close them between the bench's
// alternating pieces (each cell idles while the others run), and every piece would reconnect.
const upstream = await startFakeUpstream({ delayMs, chunkDelayMs, keepAliveTimeoutMs: 75_000 });
// Recording every request would grow without bound under load.
upstream.requests.push = () => 0;
process.stdout.write(`READY ${upstream.url}\n`);
process.on('SIGTERM', () => void upstream.close().finally(() => process.exit(0)));
