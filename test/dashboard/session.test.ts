/**
 * The dashboard's session when its token changes, in a real Chromium against the real daemon
 * (built dist/): naming the owner ends the link's token on the server and hands the page a new
 * one, while the page's polls go on. A poll still in flight with the old token is answered 401;
 * that answer is the old token's, and the session goes on with the new one.
 */
import type { Request, Route } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { useSignedInDashboard } from '../support/dashboard-session.js';

const dashboard = useSignedInDashboard();

const OWNER = { email: 'owner@example.com', password: 'correct horse battery' };
const SESSION_KEY = 'runguard.session';

describe('the session when its token changes', { timeout: 120_000 }, () => {
  it("when a poll sent with the link's token is answered after the owner is named, then the page stays signed in", async () => {
    const { page } = dashboard;
    const linkToken = await page.evaluate((key) => sessionStorage.getItem(key), SESSION_KEY);
    expect(linkToken).toBeTruthy();
    // The kill switch banner reads the workspace every 2 s: its next read is held at the browser.
    let hold!: (route: Route) => void;
    const held = new Promise<Route>((resolve) => (hold = resolve));
    await page.route('**/v1/workspace', (route) => hold(route), { times: 1 });
    const poll = await held;
    expect(poll.request().headers().authorization).toBe(`Bearer ${linkToken}`);

    await page.getByLabel('Owner email', { exact: true }).fill(OWNER.email);
    await page.getByLabel('Password (8 or more characters)').fill(OWNER.password);
    await page.getByRole('button', { name: 'Set owner' }).click();
    await page.getByText(`${OWNER.email} · default`).waitFor();
    const ownerToken = await page.evaluate((key) => sessionStorage.getItem(key), SESSION_KEY);
    expect(ownerToken).not.toBe(linkToken);

    // The held read reaches the daemon now, with the token the owner's naming ended; each read
    // the page sends once its 401 is in is kept (in the order the browser tells of them).
    let answered = false;
    const readsAfter = new Set<Request>();
    const onFinished = (request: Request) => {
      if (request === poll.request()) answered = true;
    };
    const onRequest = (request: Request) => {
      if (answered) readsAfter.add(request);
    };
    page.on('requestfinished', onFinished);
    page.on('request', onRequest);
    await poll.continue();
    // Asked again with the owner's token (a page that took the 401 for its own is signed out, and reads no more).
    const again = await page.waitForResponse(
      (response) => readsAfter.has(response.request()) && response.url().endsWith('/v1/workspace'),
    );
    page.off('requestfinished', onFinished);
    page.off('request', onRequest);
    expect((await poll.request().response())?.status()).toBe(401);
    expect(again.status()).toBe(200);
    expect(again.request().headers().authorization).toBe(`Bearer ${ownerToken}`);
    expect(await page.evaluate((key) => sessionStorage.getItem(key), SESSION_KEY)).toBe(ownerToken);
    expect(new URL(page.url()).pathname).toBe('/');
    await page.getByText(`${OWNER.email} · default`).waitFor();
  });
});
