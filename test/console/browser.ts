/**
 * What the console's browser tests share: Debian's chromium driven by playwright-core, and a Berth server
 * (the real engine with its real gate, Cedar and SQLite, over the in-memory driver of
 * test/helpers/engine.ts) serving the built console on 127.0.0.1.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import type { Clock } from '../../src/core/index.js';
import { createApp, type AppOptions } from '../../src/server/app.js';
import { startServer, type RunningServer } from '../../src/server/serve.js';
import { silentLogger } from '../../src/server/log.js';
import { upgradeHandlers } from '../../src/server/upgrades.js';
import { Berth } from '../../src/sdk/index.js';
import { createTestEngine, type TestEngine } from '../helpers/engine.js';
import { REPO, hasCommand } from '../helpers/env.js';

export const CHROMIUM = '/usr/bin/chromium';
export const SCREENSHOTS = join(REPO, 'docs', 'console');

export function chromiumMissing(): string | undefined {
  if (!existsSync(CHROMIUM) || !hasCommand(CHROMIUM)) return `${CHROMIUM} is not installed (npm run setup installs it)`;
  if (!existsSync(join(REPO, 'dist', 'console', 'index.html'))) return 'dist/console is not built';
  return undefined;
}

export function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

export interface ConsoleServer {
  t: TestEngine;
  http: RunningServer;
  url: string;
  root: Berth;
  as(token: string): Berth;
  close(): Promise<void>;
}

export async function startConsoleServer(o: { clock?: Clock; console?: AppOptions['console'] } = {}): Promise<ConsoleServer> {
  const t = await createTestEngine(o.clock ? { clock: o.clock } : {});
  const http = await startServer({
    app: createApp({ engine: t.engine, ...(o.clock ? { clock: o.clock } : {}), ...(o.console ? { console: o.console } : {}) }),
    host: '127.0.0.1',
    port: 0,
    graceMs: 200,
    upgrades: { handlers: upgradeHandlers(t.engine, silentLogger) },
  });
  const as = (token: string) => new Berth({ url: http.url, token });
  return {
    t,
    http,
    url: http.url,
    root: as(t.rootKey),
    as,
    async close() {
      await http.close();
      await t.close();
    },
  };
}

/** Waits for `check` to hold (polling), or fails with `what`. */
export async function until<T>(what: string, check: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 15_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
