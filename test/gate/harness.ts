/**
 * A real Berth for the gate tests: SQLite in a temp data directory, real Cedar, real gVisor sandboxes, the
 * HTTP app on 127.0.0.1:0, and SDK clients per principal (root, tenant operators, session agents).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '../../src/core/index.js';
import { createApp } from '../../src/server/app.js';
import { createBerth, type Berth as ServerSide } from '../../src/server/compose.js';
import { startServer, type RunningServer } from '../../src/server/serve.js';
import { Berth } from '../../src/sdk/index.js';
import { IMAGE_CACHE } from '../helpers/env.js';

export class FakeClock implements Clock {
  constructor(public t = Date.now()) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

export interface GateServer {
  dataDir: string;
  url: string;
  side: ServerSide;
  http: RunningServer;
  root: Berth;
  as(token: string): Berth;
  /** Stops HTTP and the engine; the data directory (and running sandboxes) stay. */
  stop(): Promise<void>;
}

export async function startGateServer(o: { dataDir?: string; clock?: Clock } = {}): Promise<GateServer> {
  const dataDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), 'berth-gate-')));
  const side = await createBerth({ dataDir, imageCacheDir: IMAGE_CACHE, idleSweepMs: 0, ...(o.clock ? { clock: o.clock } : {}) });
  const http = await startServer({ app: createApp({ engine: side.engine, ...(o.clock ? { clock: o.clock } : {}) }), port: 0, graceMs: 200 });
  const as = (token: string) => new Berth({ url: http.url, token });
  return {
    dataDir,
    url: http.url,
    side,
    http,
    root: as(side.rootKey),
    as,
    async stop() {
      await http.close();
      await side.close();
    },
  };
}

/** Terminates every session and removes the data directory. */
export async function destroyGateServer(s: GateServer | undefined): Promise<void> {
  if (!s) return;
  for (const x of await s.root.sessions.list().catch(() => [])) await x.terminate().catch(() => undefined);
  await s.stop().catch(() => undefined);
  await rm(s.dataDir, { recursive: true, force: true });
}

export interface TenantHandle {
  id: string;
  apiKey: string;
  op: Berth;
}

export async function newTenant(s: GateServer, name: string): Promise<TenantHandle> {
  const t = await s.root.tenants.create(name);
  return { id: t.id, apiKey: t.apiKey, op: s.as(t.apiKey) };
}

export interface SessionHandle {
  id: string;
  agentToken: string;
  agent: Berth;
}

export async function newSession(s: GateServer, op: Berth): Promise<SessionHandle> {
  const x = await op.sessions.create({ memoryMb: 256 });
  return { id: x.id, agentToken: x.agentToken as string, agent: s.as(x.agentToken as string) };
}

/** The error code a promise rejects with (or 'resolved'). */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  return p.then(
    () => 'resolved',
    (e: unknown) => String((e as { code?: unknown }).code ?? 'no-code'),
  );
}

/** A tenant policy for the tests: fs.read only under /workspace, http GET free and POST by approval. */
export const TEST_POLICY = `
@id("read-workspace")
permit (principal, action == Action::"fs.read", resource) when { context.args.path like "/workspace/*" };

@id("list-anything")
permit (principal, action == Action::"fs.list", resource);

@id("write-anything")
permit (principal, action == Action::"fs.write", resource);

@id("shell")
permit (principal, action == Action::"shell.exec", resource);

@id("http-get")
permit (principal, action == Action::"http.request", resource) when { context.args.method == "GET" };

@id("http-post-needs-approval")
@approval("required")
permit (principal, action == Action::"http.request", resource) when { context.args.method == "POST" };

@id("other-read-tools")
permit (principal, action in Action::"read", resource) unless { action == Action::"fs.read" };

@id("irreversible-needs-approval")
@approval("required")
permit (principal, action in Action::"irreversible", resource);

@id("no-forbidden-word")
@reason("the command contains a forbidden word")
forbid (principal, action == Action::"shell.exec", resource) when { context.args.command like "*forbidden-word*" };
`;
