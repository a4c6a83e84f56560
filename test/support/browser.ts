/**
 * A real Chromium for the dashboard's tests: Debian's package at /usr/bin/chromium (CI installs it
 * when missing, see .ci/run), driven by playwright-core. Nothing is downloaded at run time.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium, type Browser, type CDPSession, type Page } from 'playwright-core';
import { PACKAGE_ROOT } from './daemon-process.js';

export const CHROMIUM = process.env.RUNGUARD_TEST_CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = join(PACKAGE_ROOT, 'test-artifacts', 'dashboard');

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium), as .ci/run does.`,
    );
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

let axeSource: string | null = null;

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[]; html: string }[];
}

/**
 * axe-core's serious and critical violations on the page as it is. The script goes in through
 * the DevTools protocol (page.evaluate), which the page's CSP does not govern: the CSP under test
 * stays as the daemon sends it.
 */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  axeSource ??= await readFile(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  const hasAxe = await page.evaluate(() => 'axe' in window);
  if (!hasAxe) await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const axe = (
      window as unknown as { axe: { run: (ctx: Document, opts: object) => Promise<{ violations: AxeViolation[] }> } }
    ).axe;
    const result = await axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => ({ target: n.target, html: n.html })),
    }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/**
 * The visible controls that Tab never reached, walking forward through the whole page. Each
 * control is tagged first, so a control is named by where it is even when it has no label. The page
 * records where focus goes as it moves (a `focusin` listener), so Tab is pressed in runs and the
 * record read once per run, not once per press: the Pricing page has some 900 controls.
 */
export async function controlsTabCannotReach(page: Page): Promise<string[]> {
  const count = await page.evaluate(() => {
    const selector =
      'a[href], button:not([disabled]), input:not([type="hidden"]):not([hidden]):not([disabled]), select:not([disabled]), textarea, summary, [tabindex="0"]';
    const visible = [...document.querySelectorAll<HTMLElement>(selector)].filter((el) => {
      if (el.closest('dialog:not([open])')) return false;
      const box = el.getBoundingClientRect();
      return box.width > 0 && box.height > 0 && getComputedStyle(el).visibility !== 'hidden';
    });
    document.querySelectorAll('[data-kb]').forEach((el) => el.removeAttribute('data-kb'));
    visible.forEach((el, i) => el.setAttribute('data-kb', String(i)));
    // One recorder per document: the dashboard changes pages without loading a new one.
    const record = window as unknown as { tabbed: string[]; onTabbed?: (event: FocusEvent) => void };
    if (record.onTabbed) document.removeEventListener('focusin', record.onTabbed, true);
    record.tabbed = [];
    record.onTabbed = (event) => {
      const el = event.target as HTMLElement;
      record.tabbed.push(
        el.getAttribute('data-kb') ?? `${el.tagName.toLowerCase()}:${(el.textContent ?? '').trim().slice(0, 20)}`,
      );
    };
    // Tab starts from the first control, whatever was clicked last.
    visible[0]?.focus();
    document.addEventListener('focusin', record.onTabbed, true);
    return visible.length;
  });
  const reached = new Set<string>(count > 0 ? ['0'] : []);
  let order: string[] = [];
  const devTools = await page.context().newCDPSession(page);
  try {
    // A date-time input takes a Tab per field (day, month, ...): more presses than controls.
    for (let pressed = 0, limit = count * 3 + 20; pressed < limit && reached.size < count;) {
      // As many presses as controls are left: the fewest that could reach them all.
      const run = Math.min(count - reached.size, limit - pressed);
      await pressTab(devTools, run);
      pressed += run;
      order = await page.evaluate(() => (window as unknown as { tabbed: string[] }).tabbed);
      for (const kb of order) if (/^\d+$/.test(kb)) reached.add(kb);
    }
  } finally {
    await devTools.detach();
  }
  const missed = await page.evaluate(
    (seen) =>
      [...document.querySelectorAll<HTMLElement>('[data-kb]')]
        .filter((el) => !seen.includes(el.getAttribute('data-kb')))
        .map(
          (el) =>
            `${el.tagName.toLowerCase()} "${(el.textContent ?? el.getAttribute('aria-label') ?? '').trim().slice(0, 40)}"`,
        ),
    [...reached],
  );
  return missed.length === 0 ? [] : [...missed, `Tab went: ${order.join(' ')}`];
}

/**
 * Presses Tab `times` times, as `page.keyboard.press('Tab')` does (the same DevTools events), but
 * sent without waiting for each answer: the page handles them in order all the same, and a
 * thousand presses take a second, not a thousand round trips.
 */
async function pressTab(devTools: CDPSession, times: number): Promise<void> {
  const key = { modifiers: 0, windowsVirtualKeyCode: 9, code: 'Tab', key: 'Tab', location: 0, isKeypad: false };
  const sent: Promise<unknown>[] = [];
  for (let i = 0; i < times; i++) {
    sent.push(devTools.send('Input.dispatchKeyEvent', { ...key, type: 'rawKeyDown', autoRepeat: false }));
    sent.push(devTools.send('Input.dispatchKeyEvent', { ...key, type: 'keyUp' }));
  }
  await Promise.all(sent);
}

export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir(ARTIFACTS, { recursive: true });
  // The page as one arrives on it: from its top, with no control's focus ring.
  await page.evaluate(() => {
    (document.activeElement as { blur?: () => void } | null)?.blur?.();
    window.scrollTo(0, 0);
  });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: false });
}
