// A real browser for UI tests: Debian's chromium, driven by playwright-core.
import fs from 'node:fs';
import { chromium } from 'playwright-core';

const CHROMIUM = process.env.KEEL_CHROMIUM ?? '/usr/bin/chromium';

/** Starts headless chromium; `t.teardown` closes it. */
export async function launch(t) {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`no chromium at ${CHROMIUM}: apt-get install -y chromium (or set KEEL_CHROMIUM)`);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.teardown(() => browser.close());
  return browser;
}

/** A page that records page errors, console errors and any request outside the admin origin (the UI works offline). */
export async function newPage(browser, t, viewport = { width: 1360, height: 900 }) {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (m) => m.type() === 'error' && !/Failed to load resource/.test(m.text()) && problems.push(`console: ${m.text()}`));
  page.on('requestfailed', (r) => {
    // Only the admin origin may be asked for anything: the UI works offline, no CDN.
    if (!r.url().startsWith('http://127.0.0.1')) problems.push(`request outside the admin origin: ${r.url()}`);
  });
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith('http://127.0.0.1') && !u.startsWith('data:') && !u.startsWith('blob:')) problems.push(`request outside the admin origin: ${u}`);
  });
  t.teardown(() => context.close());
  return { page, problems };
}
