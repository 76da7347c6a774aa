import { existsSync, mkdirSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium, type Page } from 'playwright-core';
import { missingPrerequisite } from './prerequisites.js';

/** Debian's `chromium` package, driven by playwright-core (CI installs it; see `.ci/run`). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Whether the browser tests can run here; says once, on stderr, why they are skipped when not (under
 * CI, which installs Chromium, its absence throws instead: test/support/prerequisites.ts).
 */
export function haveChromium(): boolean {
  const present = existsSync(CHROMIUM);
  if (!present)
    missingPrerequisite(`browser tests skipped: ${CHROMIUM} is missing (apt-get install chromium)`);
  return present;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** Saves a screenshot under `test-output/` and returns its path. */
export async function screenshot(page: Page, name: string, fullPage = true): Promise<string> {
  const file = path.join(fileURLToPath(new URL('../../', import.meta.url)), 'test-output', name);
  mkdirSync(path.dirname(file), { recursive: true });
  await page.screenshot({ path: file, fullPage });
  return file;
}

/** The text of each cell of a model's row on the status page, keyed by the column headers. */
export async function statusRowOf(page: Page, modelId: string): Promise<Record<string, string>> {
  const headers = await page.locator('#models thead th').allTextContents();
  const cells = await page.locator(`#models tbody tr[data-model-id="${modelId}"] > *`).allTextContents();
  return Object.fromEntries(cells.map((cell, index) => [headers[index] ?? `column ${index}`, cell]));
}
