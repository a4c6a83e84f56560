/**
 * `npm test` after its build: vitest and the Python client's pytest side by side. They share no
 * state (each test file, and pytest's daemon, has a database and a Redis prefix of its own), and
 * pytest mostly waits on its daemon: time the vitest workers leave. vitest's output streams;
 * pytest's is printed whole once both ended. Exits non-zero when either failed.
 */
import { spawn } from 'node:child_process';

interface Ended {
  code: number;
  output: string;
}

function run(command: string, args: string[], capture: boolean): Promise<Ended> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: capture ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), output }));
  });
}

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const python = run(npm, ['run', '--silent', 'test:python'], true);
const vitest = await run(npm, ['exec', '--', 'vitest', 'run'], false);
const pytest = await python;
process.stdout.write(`\n::: pytest (npm run test:python)\n${pytest.output}`);
if (vitest.code !== 0) console.error(`::: vitest failed (exit ${vitest.code})`);
if (pytest.code !== 0) console.error(`::: pytest failed (exit ${pytest.code})`);
process.exitCode = vitest.code || pytest.code;
