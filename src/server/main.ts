/**
 * `berth serve`: the composition root of the server and the only place on that side that reads
 * process.env. Options: flag > environment > default.
 *   --port N      (else $BERTH_PORT, else 7070; 0 = any free port)
 *   --host ADDR   (default 127.0.0.1)
 *   --data DIR    (else $BERTH_DATA, else ./.berth)
 *   --database URL  (else $BERTH_DATABASE, else the SQLite file <data>/berth.db): postgres://user@host:port/db
 *   $BERTH_LOG_LEVEL  debug | info | warn | error (default info)
 *   --audit-key FILE  (else $BERTH_AUDIT_KEY, else <data>/audit.key) Ed25519 key signing audit tree heads
 *   --accept-audit-rollback   start although the log is behind its last signed head (recorded)
 *   --checkpoint-every 5m --checkpoint-to FILE|URL   publish signed heads outside the data directory
 */
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { InvalidArgumentError } from '../core/index.js';
import { BUILTIN_TOOLS, compileToolSchemas, type ToolDefinition } from '../policy/index.js';
import { createApp } from './app.js';
import { createBerth, type Berth } from './compose.js';
import { lockDataDir } from './datalock.js';
import { LOG_LEVELS, createJsonLogger, type LogLevel, type Logger } from './log.js';
import { startServer, type RunningServer, type UpgradeHandler } from './serve.js';
import { StartupProgress, startingGate, terminalProgress } from './starting.js';
import { parseCheckpointTarget, parseDuration, startCheckpointPublisher, type CheckpointTarget } from './audit-publisher.js';
import { upgradeHandlers } from './upgrades.js';

export interface ServeOptions {
  port: number;
  host: string;
  dataDir: string;
  /** Where built images are cached: --image-cache, else BERTH_IMAGE_CACHE, else <dataDir>/images. */
  imageCacheDir: string;
  logLevel: LogLevel;
  /** A postgres:// URL; undefined = the embedded SQLite store. */
  database?: string;
  auditKeyPath: string;
  acceptAuditRollback: boolean;
  /** Both set or neither (src/server/audit-publisher.ts). */
  checkpoints?: { everyMs: number; to: CheckpointTarget };
  /** --console-idle-logoff: a web-console session ends after this long idle, ms. Default 15 min. */
  consoleIdleMs?: number;
}

export const SERVE_USAGE =
  'berth serve [--port 7070] [--host 127.0.0.1] [--data DIR] [--image-cache DIR] [--database postgres://…] [--audit-key FILE] [--accept-audit-rollback] [--checkpoint-every 5m --checkpoint-to FILE|URL] [--console-idle-logoff 15m]';

function usage(message: string): InvalidArgumentError {
  return new InvalidArgumentError(message, { details: { usage: SERVE_USAGE } });
}

export function parseServeArgs(argv: string[], env: NodeJS.ProcessEnv, cwd: string): ServeOptions {
  let values: {
    port?: string; host?: string; data?: string; 'image-cache'?: string; database?: string;
    'audit-key'?: string; 'accept-audit-rollback'?: boolean; 'checkpoint-every'?: string; 'checkpoint-to'?: string;
    'console-idle-logoff'?: string;
  };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: 'string' }, host: { type: 'string' }, data: { type: 'string' }, 'image-cache': { type: 'string' }, database: { type: 'string' },
        'audit-key': { type: 'string' }, 'accept-audit-rollback': { type: 'boolean' }, 'checkpoint-every': { type: 'string' }, 'checkpoint-to': { type: 'string' },
        'console-idle-logoff': { type: 'string' },
      },
      allowPositionals: false,
      strict: true,
    }));
  } catch (e) {
    throw usage((e as Error).message);
  }
  const portText = values.port ?? env.BERTH_PORT ?? '7070';
  const port = Number(portText);
  const portName = values.port !== undefined ? '--port' : env.BERTH_PORT !== undefined ? 'BERTH_PORT' : 'port';
  if (!/^\d+$/.test(portText) || port > 65535) throw usage(`${portName}: must be an integer 0..65535, got ${JSON.stringify(portText)}`);
  const host = values.host ?? '127.0.0.1';
  if (host === '') throw usage('--host: must not be empty');
  const level = (env.BERTH_LOG_LEVEL ?? 'info') as LogLevel;
  if (!LOG_LEVELS.includes(level)) throw usage(`BERTH_LOG_LEVEL: must be one of ${LOG_LEVELS.join(', ')}`);
  const dataDir = resolve(cwd, values.data ?? env.BERTH_DATA ?? './.berth');
  const cache = values['image-cache'] ?? env.BERTH_IMAGE_CACHE;
  const database = values.database ?? (env.BERTH_DATABASE || undefined);
  if (database !== undefined && !/^postgres(ql)?:\/\/./.test(database)) {
    throw usage(`--database: must be a postgres:// or postgresql:// URL (without it Berth uses <data>/berth.db)`);
  }
  const auditKey = values['audit-key'] ?? env.BERTH_AUDIT_KEY;
  const every = values['checkpoint-every'];
  const to = values['checkpoint-to'];
  if ((every === undefined) !== (to === undefined)) throw usage('--checkpoint-every and --checkpoint-to go together');
  const checkpoints = every !== undefined && to !== undefined
    ? { everyMs: parseDuration(every, '--checkpoint-every'), to: parseCheckpointTarget(to, { cwd, dataDir, field: '--checkpoint-to' }) }
    : undefined;
  return {
    port, host, dataDir, imageCacheDir: cache ? resolve(cwd, cache) : join(dataDir, 'images'), logLevel: level, ...(database ? { database } : {}),
    auditKeyPath: auditKey ? resolve(cwd, auditKey) : join(dataDir, 'audit.key'),
    acceptAuditRollback: values['accept-audit-rollback'] ?? false,
    ...(checkpoints ? { checkpoints } : {}),
    ...(values['console-idle-logoff'] !== undefined ? { consoleIdleMs: parseDuration(values['console-idle-logoff'], '--console-idle-logoff') } : {}),
  };
}

/** Runs until SIGINT or SIGTERM, then closes gracefully. A second signal exits at once. */
export async function serveMain(argv: string[]): Promise<void> {
  const opts = parseServeArgs(argv, process.env, process.cwd());
  const log: Logger = createJsonLogger({ level: opts.logLevel, write: (l) => void process.stdout.write(l) });
  // Before anything is opened: a second server on this directory would adopt the first one's sandboxes.
  const lock = lockDataDir(opts.dataDir);
  // Listen first: while the backends get ready (the first start builds the base image) /healthz reports
  // progress and /v1 answers 503 unavailable, instead of the port refusing connections.
  const progress = new StartupProgress();
  const gate = startingGate(progress);
  // Upgrades (WebSocket terminals and ports, port-forward) reach the engine once it is there; before, 503.
  const upgrades: { handlers: UpgradeHandler[] | null } = { handlers: null };
  let server: RunningServer;
  try {
    server = await startServer({ app: gate, host: opts.host, port: opts.port, log, upgrades });
  } catch (e) {
    lock.release();
    throw e;
  }
  log.info('listening', { url: server.url, dataDir: opts.dataDir, rootKeyFile: join(opts.dataDir, 'root.key'), starting: true });
  const live = process.stderr.isTTY ? terminalProgress(progress, process.stderr) : null;
  let berth: Berth;
  try {
    berth = await createBerth({
      dataDir: opts.dataDir, imageCacheDir: opts.imageCacheDir, ...(opts.database ? { database: opts.database } : {}), log: (line: string) => log.info(line), progress,
      auditKeyPath: opts.auditKeyPath, acceptAuditRollback: opts.acceptAuditRollback,
    });
  } catch (e) {
    live?.stop('start failed');
    await server.close();
    lock.release();
    throw e;
  }
  const proofs = berth.engine.auditProofs;
  const publisher = opts.checkpoints && proofs
    ? startCheckpointPublisher({ ...opts.checkpoints, log, checkpoint: async () => proofs.checkpoint(await berth.engine.authenticate(berth.rootKey)) })
    : undefined;
  gate.ready(createApp({ engine: berth.engine, log, ...(opts.consoleIdleMs !== undefined ? { console: { idleMs: opts.consoleIdleMs } } : {}) }));
  upgrades.handlers = upgradeHandlers(berth.engine, log);
  const r = berth.recovery;
  log.info('recovered', { adopted: r.adopted.length, failed: r.failed, orphansRemoved: r.orphansRemoved, snapshotDirsRemoved: r.snapshotDirsRemoved.length, elapsedMs: r.elapsedMs });
  const health = berth.engine.health();
  live?.stop(`ready on ${server.url} (${Object.entries(health.backends).map(([b, h]) => `${b} ${h.available ? 'available' : 'unavailable'}`).join(', ')})`);
  log.info('ready', { url: server.url, startS: progress.view().elapsedS, backends: health.backends });
  warmValidators(BUILTIN_TOOLS);

  const signal = await new Promise<NodeJS.Signals>((done) => {
    process.once('SIGINT', () => done('SIGINT'));
    process.once('SIGTERM', () => done('SIGTERM'));
  });
  log.info('shutting down', { signal });
  const again = () => process.exit(130);
  process.once('SIGINT', again);
  process.once('SIGTERM', again);
  await server.close();
  await publisher?.stop();
  await berth.close();
  lock.release();
  log.info('stopped');
}

/**
 * Berth's own tools' validators are compiled once the server is ready, one tool per turn of the event loop, so
 * neither the start (policy/tools.ts, deferCompile) nor the first gated call pays for them.
 */
function warmValidators(tools: readonly ToolDefinition[], i = 0): void {
  if (i < tools.length) setImmediate(() => (compileToolSchemas(tools[i]!), warmValidators(tools, i + 1))).unref();
}
