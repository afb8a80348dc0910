/**
 * The real engine for tests that need no root: SessionManager with its real gate and Cedar, SQLite in
 * memory, snapshots in a temporary directory, and the in-memory driver (src/drivers/memory) standing in
 * for gVisor. It is wired by the same composeEngine() as the server (src/server/compose.ts), so it follows
 * the server's wiring; only the driver is a test double, at the port, and it passes the driver conformance
 * suite. Not shipped: test/ is outside tsconfig.build.json.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { systemClock, type Clock, type Principal } from '../../src/core/index.js';
import { MemoryDriver, type MemoryDriverOptions } from '../../src/drivers/memory/driver.js';
import type { SessionManager } from '../../src/engine/manager.js';
import { newSecret } from '../../src/engine/auth.js';
import { composeEngine, type Berth as ServerSide, type EngineStore } from '../../src/server/compose.js';
import { openSqliteStore } from '../../src/store/sqlite.js';
import { LocalSnapshotStore } from '../../src/store/snapshot-dir.js';

export interface TestEngine {
  engine: SessionManager;
  /** The driver under the engine, for fault injection (failNext, crash) and checks (has, list). */
  driver: MemoryDriver;
  store: EngineStore;
  snapshots: LocalSnapshotStore;
  /** The root operator token. */
  rootKey: string;
  root: Principal;
  side: ServerSide;
  dataDir: string;
  /** Closes the engine (and with it the driver and store) and removes the temporary directory. */
  close(): Promise<void>;
}

export interface TestEngineOptions {
  clock?: Clock;
  driver?: MemoryDriverOptions;
  /** A SQLite file instead of an in-memory database (e.g. to reopen it). Default ':memory:'. */
  dbPath?: string;
  /** An open store to use instead (e.g. a PostgresStore); it is closed with the engine. */
  store?: EngineStore;
  /** The data directory to use (e.g. to restart over it); removed by close() only when created here. */
  dataDir?: string;
}

export async function createTestEngine(o: TestEngineOptions = {}): Promise<TestEngine> {
  const dataDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), 'berth-test-engine-')));
  const clock = o.clock ?? systemClock;
  const store = o.store ?? openSqliteStore({ path: o.dbPath ?? ':memory:', clock });
  const snapshots = new LocalSnapshotStore(join(dataDir, 'snapshots'));
  const driver = new MemoryDriver({ now: () => clock.now(), ...o.driver });
  const rootKey = newSecret('btr');
  const side = await composeEngine({ dataDir, store, snapshots, drivers: { [driver.name]: driver }, rootKey, clock, idleSweepMs: 0 });
  let closed = false;
  return {
    engine: side.manager,
    driver,
    store,
    snapshots,
    rootKey,
    root: await side.manager.authenticate(rootKey),
    side,
    dataDir,
    async close() {
      if (closed) return;
      closed = true;
      await side.close();
      if (!o.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}
