/**
 * A signed-in dashboard for the browser tests: the real daemon (built dist/) as a child process,
 * a real Chromium, and a page signed in with the one-time link `runguard dashboard` prints, on
 * the Overview page. A file's tests share one (`useSignedInDashboard`).
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import { launchChromium } from './browser.js';
import { runCli } from './daemon.js';
import { startDaemonProcess, type DaemonProcess } from './daemon-process.js';
import { caller, type Caller } from './harness.js';

export interface DashboardSession {
  daemon: DaemonProcess;
  browser: Browser;
  page: Page;
  /** The API, with the daemon's key. */
  api: Caller;
  /** Closes the browser, then stops the daemon and drops its database. */
  close(): Promise<void>;
}

export interface DashboardOptions {
  /** @default 1280 x 900 */
  viewport?: { width: number; height: number };
  /** How long the daemon's start may take. @default startDaemonProcess's */
  startTimeoutMs?: number;
}

export async function signedInDashboard(options: DashboardOptions = {}): Promise<DashboardSession> {
  const daemon = await startDaemonProcess({
    env: { RUNGUARD_SCRYPT_COST: '1024' },
    startTimeoutMs: options.startTimeoutMs,
  });
  let browser: Browser | undefined;
  try {
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: options.viewport ?? { width: 1280, height: 900 } });
    const page = await context.newPage();
    const result = await runCli(['dashboard', '--json', '--url', daemon.url, '--api-key', daemon.apiKey]);
    expect(result.code, result.stderr).toBe(0);
    await page.goto((JSON.parse(result.stdout) as { url: string }).url);
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    const opened = browser;
    return {
      daemon,
      browser: opened,
      page,
      api: caller(daemon.url, daemon.apiKey),
      async close() {
        await opened.close();
        await daemon.close();
      },
    };
  } catch (error) {
    await browser?.close();
    await daemon.close();
    throw error;
  }
}

/**
 * The file's signed-in dashboard: started in its `beforeAll` (given two minutes: a daemon and a
 * browser start on a loaded machine), closed in its `afterAll`. The fields are set once the first ran.
 */
export function useSignedInDashboard(options: DashboardOptions = {}): DashboardSession {
  const fixture = {} as DashboardSession;
  let started: DashboardSession | undefined;
  beforeAll(async () => {
    started = await signedInDashboard(options);
    Object.assign(fixture, started);
  }, 120_000);
  afterAll(async () => {
    await started?.close();
  });
  return fixture;
}
