/** A real Berth server for end-to-end tests: real store, real runsc, real HTTP on 127.0.0.1:0. */
import { afterAll, beforeAll } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '../../src/core/index.js';
import { createApp } from '../../src/server/app.js';
import { createBerth, type Berth as ServerSide } from '../../src/server/compose.js';
import { startServer, type RunningServer } from '../../src/server/serve.js';
import { silentLogger } from '../../src/server/log.js';
import { upgradeHandlers } from '../../src/server/upgrades.js';
import { Berth } from '../../src/sdk/index.js';
import { IMAGE_CACHE } from './env.js';

export interface TestServer {
  dataDir: string;
  url: string;
  rootKey: string;
  side: ServerSide;
  http: RunningServer;
  client: Berth;
  /** Stops the server (sandboxes keep running, as after a crash, unless wipe is true). */
  stop(): Promise<void>;
  /** Stops and removes every session and the data directory. */
  destroy(): Promise<void>;
}

export async function startTestServer(o: { dataDir?: string; clock?: Clock; idleSweepMs?: number } = {}): Promise<TestServer> {
  const dataDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), 'berth-e2e-')));
  const side = await createBerth({ dataDir, imageCacheDir: IMAGE_CACHE, clock: o.clock, idleSweepMs: o.idleSweepMs ?? 0 });
  const http = await startServer({ app: createApp({ engine: side.engine, clock: o.clock }), port: 0, upgrades: { handlers: upgradeHandlers(side.engine, silentLogger) } });
  const client = new Berth({ url: http.url, token: side.rootKey });
  const stop = async () => {
    await http.close();
    await side.close();
  };
  return {
    dataDir,
    url: http.url,
    rootKey: side.rootKey,
    side,
    http,
    client,
    stop,
    async destroy() {
      for (const s of await client.sessions.list().catch(() => [])) await s.terminate().catch(() => undefined);
      await stop().catch(() => undefined);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** A test server for a describe block: started before its tests, destroyed after them. The holder's `t` is set in beforeAll. */
export function useTestServer(): { t: TestServer } {
  const h = {} as { t: TestServer };
  beforeAll(async () => {
    h.t = await startTestServer();
  }, 300_000);
  afterAll(async () => {
    await h.t?.destroy();
  }, 120_000);
  return h;
}
