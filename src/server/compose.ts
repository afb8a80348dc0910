import { existsSync, statfsSync } from 'node:fs';
import { totalmem } from 'node:os';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BACKENDS, sha256Hex, systemClock, type AuditLog, type BackendName, type Clock, type SandboxDriver, type SnapshotStore, type Store } from '../core/index.js';
import { DRIVERS, backendList } from '../drivers/registry.js';
import { SessionManager, type SessionManagerOptions } from '../engine/manager.js';
import { recover, type RecoveryReport } from '../engine/recovery.js';
import { resolveIdleSweepMs } from '../engine/options.js';
import { newSecret } from '../engine/auth.js';
import { openSqliteStore } from '../store/sqlite.js';
import { verifyAudit, type VerifiableAuditLog } from '../store/audit.js';
import { LocalSnapshotStore } from '../store/snapshot-dir.js';
import type { Engine } from '../engine/api.js';
import { AuditProofs } from '../engine/audit-proofs.js';
import { checkAuditAtStart, ledgerPathFor, openAuditKey, type KeyedAuditLog } from '../store/audit-key.js';
import { DEFAULT_QUOTAS } from '../engine/quotas.js';
import type { TenantQuotas } from '../core/index.js';

/**
 * Quotas of a tenant root has not limited: one machine's worth, so a single tenant can use this host
 * whole but no more (its memory, the data directory's disk); sessions and egress keep DEFAULT_QUOTAS.
 */
export function machineQuotas(dataDir: string): TenantQuotas {
  let diskGb = DEFAULT_QUOTAS.maxSnapshotGb;
  try {
    const st = statfsSync(dataDir);
    diskGb = Math.max(1, Math.floor((st.blocks * st.bsize) / 2 ** 30));
  } catch {
    // the directory is made later; keep the fixed default
  }
  return { ...DEFAULT_QUOTAS, maxMemoryMb: Math.floor(totalmem() / 2 ** 20), maxSnapshotGb: diskGb };
}

export interface BerthOptions {
  /** Data directory (SQLite file, snapshots, sandbox state, root.key). Required. */
  dataDir: string;
  /**
   * A PostgreSQL URL (`postgres://…`) to keep records and the audit log in, instead of `<dataDir>/berth.db`.
   * The audit head anchor stays in `<dataDir>/audit-head`. Default: the embedded SQLite store.
   */
  database?: string;
  /** Where built images are cached. Default `<dataDir>/images`. */
  imageCacheDir?: string;
  /**
   * Backends to start. Default: every one of BACKENDS (a backend that cannot start is reported, not fatal;
   * an unknown name is a ConfigError).
   */
  backends?: readonly BackendName[];
  /** How often idle sessions are checked, ms. Default 1000; 0 disables the timer. */
  idleSweepMs?: number;
  clock?: Clock;
  defaults?: SessionManagerOptions['defaults'];
  log?: (line: string) => void;
  /** Startup phases and build lines as they happen, for /healthz and the terminal. Default: none. */
  progress?: { set(phase: string, message: string): void; line(text: string, phase: string): void; done(phase: string): void };
  /** The audit signing key file (created 0600 if missing). Default `<dataDir>/audit.key`: keep it elsewhere in production. */
  auditKeyPath?: string;
  /** Start even though the audit log is behind its last signed head, recording that it did. Default false. */
  acceptAuditRollback?: boolean;
}

export interface Berth {
  engine: Engine;
  manager: SessionManager;
  rootKey: string;
  recovery: RecoveryReport;
  dataDir: string;
  close(): Promise<void>;
}

/** The repository (or installed package) root: where dist/agent/berth-agent is built. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('package.json not found above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
  return dir;
}

/** Reads <data>/root.key, creating it (mode 0600) on first start. */
async function rootKey(dataDir: string): Promise<string> {
  const file = join(dataDir, 'root.key');
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim();
  const key = newSecret('btr');
  await writeFile(file, key + '\n', { mode: 0o600, flag: 'wx' });
  await chmod(file, 0o600);
  return key;
}

/** Builds the whole server side from options: store, snapshot store, drivers, engine; then recovers. */
export async function createBerth(opts: BerthOptions): Promise<Berth> {
  const backends = backendList(opts.backends ?? BACKENDS);
  const dataDir = resolve(opts.dataDir);
  const log = opts.log ?? (() => undefined);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const key = await rootKey(dataDir);
  const clock = opts.clock ?? systemClock;
  let store: EngineStore;
  if (opts.database) {
    // Loaded only when asked for: the pg driver is about 30 modules a SQLite server would load at every start.
    const pg = await import('../store/postgres/store.js');
    store = await pg.openPostgresStore({ url: opts.database, clock, anchorPath: join(dataDir, 'audit-head') });
    log(`store: PostgreSQL ${pg.redact(opts.database)}`);
  } else {
    store = openSqliteStore({ path: join(dataDir, 'berth.db'), clock });
    log(`store: SQLite ${join(dataDir, 'berth.db')}`);
  }
  const snapshots = new LocalSnapshotStore(join(dataDir, 'snapshots'));
  const cacheDir = opts.imageCacheDir ?? join(dataDir, 'images');
  const agentPath = join(packageRoot(), 'dist', 'agent', 'berth-agent');

  const drivers: Partial<Record<BackendName, SandboxDriver>> = {};
  const unavailable: Partial<Record<BackendName, string>> = {};
  const progress = opts.progress;
  // Side by side: each probe waits on host commands (runsc, qemu), and a restart waits for the slowest only.
  const made = await Promise.allSettled(backends.map(async (b) => {
    progress?.set(b, DRIVERS[b].preparing);
    try {
      const d = await DRIVERS[b].create({ stateDir: join(dataDir, b), cacheDir, agentPath, log, progress: progress && ((l) => progress.line(l, b)) });
      await d.probe();
      return d;
    } finally {
      progress?.done(b);
    }
  }));
  backends.forEach((b, i) => {
    const r = made[i]!;
    if (r.status === 'fulfilled') drivers[b] = r.value;
    else {
      unavailable[b] = (r.reason as Error).message;
      log(`backend ${b} unavailable: ${unavailable[b]}`);
    }
  });

  progress?.set('recovery', 'recovering sessions');
  return composeEngine({
    dataDir, store, snapshots, drivers, unavailable, rootKey: key, clock, defaults: opts.defaults, idleSweepMs: opts.idleSweepMs, log,
    auditKeyPath: opts.auditKeyPath, acceptAuditRollback: opts.acceptAuditRollback,
  });
}

/**
 * One capability of each wired backend's driver (its memory floor, where its writes live): session options are
 * checked without a driver at hand.
 */
function byBackend<T>(drivers: Partial<Record<BackendName, SandboxDriver>>, pick: (c: SandboxDriver['capabilities']) => T): Partial<Record<BackendName, T>> {
  const out: Partial<Record<BackendName, T>> = {};
  for (const b of BACKENDS) {
    const d = drivers[b];
    if (d) out[b] = pick(d.capabilities);
  }
  return out;
}

/** A store of either kind with its audit log and the log's signed tree (SqliteStore, PostgresStore). */
export type EngineStore = Store & { readonly audit: AuditLog & VerifiableAuditLog & KeyedAuditLog };

/** What composeEngine wires together: everything createBerth opens, already open. */
export interface EngineParts {
  dataDir: string;
  store: EngineStore;
  snapshots: SnapshotStore;
  drivers: Partial<Record<BackendName, SandboxDriver>>;
  /** Why a configured backend is missing (shown by /healthz). */
  unavailable?: Partial<Record<BackendName, string>>;
  /** The root operator token. */
  rootKey: string;
  clock: Clock;
  defaults?: SessionManagerOptions['defaults'];
  /** How often idle sessions are checked, ms. Default 1000; 0 disables the timer. */
  idleSweepMs?: number;
  log?: (line: string) => void;
  /** See BerthOptions. Default `<dataDir>/audit.key`. */
  auditKeyPath?: string;
  acceptAuditRollback?: boolean;
}

/**
 * The engine over open parts: SessionManager with its gate, recovery, the idle sweeper. createBerth calls it
 * with real drivers; the tests' createTestEngine (test/helpers/engine.ts) with the in-memory driver, so both
 * get the same wiring. close() closes the engine, its drivers and the store.
 */
export async function composeEngine(parts: EngineParts): Promise<Berth> {
  const { store, snapshots, drivers, clock } = parts;
  const log = parts.log ?? (() => undefined);
  const sweepMs = resolveIdleSweepMs(parts.idleSweepMs);
  const keyPath = resolve(parts.auditKeyPath ?? join(parts.dataDir, 'audit.key'));
  // Both stores keep the Merkle tree and its signed heads (store.audit.tree): one wiring for either.
  let auditProofs: AuditProofs;
  try {
    const signer = openAuditKey(keyPath);
    await store.audit.tree.attachSigner(signer, { ledgerPath: ledgerPathFor(keyPath), log });
    await checkAuditAtStart({ store, signer, keyPath, acceptRollback: parts.acceptAuditRollback ?? false, clock, log });
    auditProofs = new AuditProofs({ tree: store.audit.tree, signer, clock });
  } catch (e) {
    await Promise.resolve(store.close()).catch(() => undefined);
    throw e;
  }
  const manager = new SessionManager({
    auditProofs,
    store,
    audit: store.audit,
    verifyAudit: () => verifyAudit(store),
    snapshots,
    drivers,
    unavailable: parts.unavailable,
    rootKeyHash: sha256Hex(parts.rootKey),
    clock,
    defaults: { ...parts.defaults, minMemoryMb: byBackend(drivers, (c) => c.minMemoryMb), writesInMemory: byBackend(drivers, (c) => c.writesInMemory) },
    quotaDefaults: machineQuotas(parts.dataDir),
    log,
    terminalRecordDir: join(parts.dataDir, 'terminals'),
    desktopDir: join(parts.dataDir, 'desktop'),
  });
  await manager.start();
  const recovery = await recover({ manager, store, snapshots, drivers, log });
  let sweeping = false;
  const timer = sweepMs > 0
    ? setInterval(() => {
        if (sweeping) return;
        sweeping = true;
        void manager.sweepIdle().finally(() => (sweeping = false));
      }, sweepMs).unref()
    : undefined;

  return {
    engine: manager,
    manager,
    rootKey: parts.rootKey,
    recovery,
    dataDir: parts.dataDir,
    async close() {
      if (timer) clearInterval(timer);
      await manager.close();
      await store.close();
    },
  };
}
