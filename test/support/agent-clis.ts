/**
 * The coding agents' own CLIs (`claude`, `codex`), pinned in test/agent-clis/package.json and
 * installed there on first use (as .ci/run does up front): ~800 MB the project's own install
 * does without. Test files running in parallel install once: the first takes a lock directory,
 * the others wait for it to go.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ROOT } from './daemon.js';

export const AGENT_CLIS_DIR = join(ROOT, 'test', 'agent-clis');

export interface AgentClis {
  /** Path of the `claude` binary (@anthropic-ai/claude-code). */
  claude: string;
  /** Path of the `codex` launcher (@openai/codex). */
  codex: string;
}

const BINS: AgentClis = {
  claude: join(AGENT_CLIS_DIR, 'node_modules', '.bin', 'claude'),
  codex: join(AGENT_CLIS_DIR, 'node_modules', '.bin', 'codex'),
};

const installed = () => Object.values(BINS).every((bin) => existsSync(bin));

/** A lock older than this was left by an install that died: taken over. */
const STALE_LOCK_MS = 15 * 60_000;

/** The CLIs' paths, installing them first when they are missing. */
export async function agentClis(): Promise<AgentClis> {
  if (installed()) return BINS;
  const lock = join(AGENT_CLIS_DIR, '.installing');
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch {
      if (installed()) return BINS;
      const age = await stat(lock).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      if (age > STALE_LOCK_MS) await rm(lock, { recursive: true, force: true });
      await sleep(500);
    }
  }
  try {
    if (!installed()) {
      // With install scripts: Claude Code's puts its platform's binary in place.
      await promisify(execFile)('npm', ['ci', '--no-audit', '--no-fund'], {
        cwd: AGENT_CLIS_DIR,
        timeout: 10 * 60_000,
        maxBuffer: 16 * 1024 * 1024,
      });
    }
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
  if (!installed()) throw new Error(`npm ci in ${AGENT_CLIS_DIR} left the agent CLIs missing`);
  return BINS;
}

/**
 * A home of its own and the environment the CLIs need to run offline against a loopback provider: a home of their own
 * (no user settings, sessions or logins read or written; the caller removes it), a dummy provider key (the proxy passes
 * it on; the fake provider takes any), and no telemetry, update checks or other traffic.
 */
export async function offlineAgentEnv(): Promise<{ env: Record<string, string>; home: string }> {
  const home = await mkdtemp(join(tmpdir(), 'rg-agent-home-'));
  await mkdir(join(home, '.codex'));
  const env = {
    HOME: home,
    XDG_CONFIG_HOME: join(home, '.config'),
    CODEX_HOME: join(home, '.codex'),
    CLAUDE_CONFIG_DIR: join(home, '.claude'),
    ANTHROPIC_API_KEY: 'sk-ant-test-dummy',
    OPENAI_API_KEY: 'sk-test-dummy',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    NO_COLOR: '1',
  };
  return { env, home };
}
