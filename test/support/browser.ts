/**
 * A real Chromium for the dashboard's tests: Debian's package at /usr/bin/chromium (CI installs it
 * when missing, see .ci/run), driven by playwright-core. Nothing is downloaded at run time.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
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
 * control is tagged first, so a control is named by where it is even when it has no label.
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
    visible.forEach((el, i) => el.setAttribute('data-kb', String(i)));
    // Tab starts from the first control, whatever was clicked last.
    visible[0]?.focus();
    return visible.length;
  });
  const reached = new Set<string>(count > 0 ? ['0'] : []);
  const order: string[] = [];
  // A date-time input takes a Tab per field (day, month, ...): more presses than controls.
  for (let i = 0; i < count * 3 + 20 && reached.size < count; i++) {
    await page.keyboard.press('Tab');
    const tag = await page.evaluate(() => {
      const el = document.activeElement;
      return {
        kb: el?.getAttribute('data-kb') ?? null,
        name: `${el?.tagName.toLowerCase()}:${(el?.textContent ?? '').trim().slice(0, 20)}`,
      };
    });
    order.push(tag.kb ?? tag.name);
    if (tag.kb !== null) reached.add(tag.kb);
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

export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir(ARTIFACTS, { recursive: true });
  // The page as one arrives on it: from its top, with no control's focus ring.
  await page.evaluate(() => {
    (document.activeElement as { blur?: () => void } | null)?.blur?.();
    window.scrollTo(0, 0);
  });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: false });
}
