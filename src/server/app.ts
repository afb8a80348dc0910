/**
 * The HTTP layer: parse a request into one engine call and render the result as a view. It never sees
 * drivers or the store. Middleware order is fixed here: request id → (auth for /v1) → route; errors and
 * unknown routes end in the one handler each.
 */
import { Hono } from 'hono';
import { ConfigError, systemClock, type Clock } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { EXEC_HEARTBEAT_MS, type HealthView } from '../protocol/index.js';
import { openApiDocument } from '../protocol/openapi.js';
import type { Env, RouteDeps } from './context.js';
import { silentLogger, type Logger } from './log.js';
import { idempotencyKeys } from './idempotency.js';
import { mcpRoutes } from './mcp-http.js';
import { errorHandler, notFound, requestAudit, requestContext } from './middleware.js';
import { auditRoutes } from './routes/audit.js';
import { ConsoleAuth, type ConsoleAuthOptions } from './console-auth.js';
import { consoleApiRoutes, consoleSignInRoutes, consoleStaticRoutes } from './routes/console.js';
import { execRoutes } from './routes/exec.js';
import { fileRoutes } from './routes/files.js';
import { processRoutes } from './routes/processes.js';
import { portRoutes } from './routes/ports.js';
import { portLinkProxyRoutes, portLinkRoutes } from './routes/port-links.js';
import { terminalRoutes } from './routes/terminals.js';
import { vncRoutes } from './routes/vnc.js';
import { desktopRoutes } from './routes/desktop.js';
import { gateRoutes } from './routes/gate.js';
import { gateAdminRoutes } from './routes/gate-admin.js';
import { sessionRoutes } from './routes/sessions.js';
import { snapshotRoutes } from './routes/snapshots.js';
import { tenantRoutes } from './routes/tenants.js';
import { templateRoutes } from './routes/templates.js';
import { packageVersion } from './version.js';

export interface AppOptions {
  engine: Engine;
  /** Default: silent. */
  log?: Logger;
  /** Time source for views (stateSeconds). Default: the system clock. */
  clock?: Clock;
  /** An exec stream without output sends a `ping` line this often, ms. Default EXEC_HEARTBEAT_MS (15000). */
  execHeartbeatMs?: number;
  /** The web console's sign-in (idle logoff, link lifetime); see console-auth.ts. */
  console?: ConsoleAuthOptions;
  /** Where the built console is. Default: dist/console of this package. */
  consoleAssetsDir?: string;
}

export function createApp(opts: AppOptions): Hono<Env> {
  const heartbeat = opts.execHeartbeatMs ?? EXEC_HEARTBEAT_MS;
  if (!Number.isInteger(heartbeat) || heartbeat < 1) throw new ConfigError(`execHeartbeatMs: must be a positive integer, got ${heartbeat}`);
  const deps: RouteDeps = { engine: opts.engine, log: opts.log ?? silentLogger, clock: opts.clock ?? systemClock, execHeartbeatMs: heartbeat };
  const app = new Hono<Env>();

  app.use('*', requestContext(deps.log));
  app.get('/healthz', (c) => {
    const h: HealthView = deps.engine.health();
    return c.json<HealthView>({ ok: h.ok, backends: h.backends }, h.ok ? 200 : 503);
  });

  let openapi: string | undefined;
  app.get('/openapi.json', (c) => {
    openapi ??= JSON.stringify(openApiDocument({ version: packageVersion() }));
    return c.body(openapi, 200, { 'content-type': 'application/json' });
  });

  // ---- the web console (issue 10): served on the API's own port and origin, see console-auth.ts ----
  const consoleAuth = new ConsoleAuth(deps.engine, deps.clock, opts.console);
  app.route('/', consoleStaticRoutes(opts.consoleAssetsDir));
  app.route('/', consoleSignInRoutes(deps, consoleAuth));
  app.use('/v1/*', consoleAuth.middleware());
  // ---- end console ----

  // Port links (issue 9 §3): /p/<token>/… needs no bearer token; each connection is audited by the engine.
  app.route('/', portLinkProxyRoutes(deps));

  // Authentication and the request audit in one: every /v1 request, allowed or refused, is recorded (issue 12 §2).
  app.use('/v1/*', requestAudit(deps.engine));
  // Idempotency-Key on the creating POSTs (issue 7 §11); inside the audit, which records replays as such.
  app.use('/v1/*', idempotencyKeys(deps.engine, () => deps.clock.now()));
  app.route('/v1', portRoutes(deps)); // ports (issue 9 §3): HTTP proxy into a session
  app.route('/v1', portLinkRoutes(deps));
  for (const routes of [sessionRoutes, execRoutes, fileRoutes, snapshotRoutes, tenantRoutes, auditRoutes, mcpRoutes, gateRoutes, gateAdminRoutes, processRoutes, templateRoutes]) {
    app.route('/v1', routes(deps));
  }
  app.route('/v1', consoleApiRoutes(deps, consoleAuth, deps.clock));
  app.route('/v1', terminalRoutes(deps));
  app.route('/v1', vncRoutes(deps));
  app.route('/v1', desktopRoutes(deps));

  app.notFound(notFound());
  app.onError(errorHandler(deps.log));
  return app;
}
