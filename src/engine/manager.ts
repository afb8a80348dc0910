import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BACKENDS,
  SandboxError,
  newId,
  type AuditEntry,
  type CallOptions,
  type ExecHandle,
  type ExecRequest,
  type FileEntry,
  type FileStat,
  type Principal,
  type SessionRecord,
  type SnapshotRecord,
  type TenantQuotas,
  type TenantRecord,
  type VerifyResult,
} from '../core/index.js';
import type { CreateSessionInput, Engine, SessionInfo, SessionListFilter, TenantInfo } from './api.js';
import type { AuditProofs } from './audit-proofs.js';
import { authenticate } from './auth.js';
import { fileService, type FileService } from './files.js';
import { ToolGate } from './gate.js';
import { Hibernation } from './hibernation.js';
import type { Idempotency } from './idempotency.js';
import { SYSTEM, SessionKernel, type RecordTools, type SessionManagerOptions } from './kernel.js';
import { Machines } from './machines.js';
import { portLinkService, type PortLinkService } from './port-links.js';
import { portService, type PortService } from './ports.js';
import { processService, type ProcessService, type ProcessSteps } from './processes.js';
import type { RequestAudit } from './request-audit.js';
import { sandboxAccess } from './sandbox-access.js';
import { ScreenshotStore } from './screenshots.js';
import { Snapshots } from './snapshots.js';
import { Tenancy } from './tenancy.js';
import { DEFAULT_TENANT_ID } from './tenants.js';
import { templateService, type TemplateService } from './templates.js';
import { terminalService, type TerminalService } from './terminals.js';
import { TicketStore } from './tickets.js';
import { requireOperator, tenantFor } from './visibility.js';
import { vncService, type VncService } from './vnc.js';
import { desktopService, type DesktopService } from './desktop-recording.js';
import { watchLinkService, type WatchLinkService } from './watch-links.js';

export { DEFAULT_TENANT_ID };
export type { SessionManagerOptions };

/**
 * The engine: every operation follows lock → check state → audit → driver → transition → persist.
 * It knows sandboxes only through the SandboxDriver port and records only through the Store port.
 *
 * This class wires the rooms together and hands each call to one of them: the session kernel
 * (engine/kernel.ts: records, the lock, transitions, audit, drivers, quotas), machines (create to
 * terminate, commands, files, pause and resume), hibernation, snapshots and tenancy. Who may see what is
 * decided in engine/visibility.ts.
 */
export class SessionManager implements Engine {
  private readonly k: SessionKernel;
  private readonly machines: Machines;
  private readonly hibernation: Hibernation;
  private readonly snapshots: Snapshots;
  private readonly tenancy: Tenancy;
  private closed = false;
  /** The tool gate: authorizes and runs every agent tool call (engine/gate.ts). */
  readonly gate: ToolGate;
  /** Background processes (engine/processes.ts), over this manager's live/audit/meter steps. */
  readonly processes: ProcessService;
  /** move, tar push/pull, watch (engine/files.ts). */
  readonly files: FileService;
  /** Every request with its principal; its log is the one the engine and the gate append to. */
  readonly requests: RequestAudit;
  /** Templates: build, list, remove, and create sessions from them (engine/templates.ts). */
  readonly templates: TemplateService;
  /** Idempotency-Key records (engine/idempotency.ts); the engine notes what it creates on the key in scope. */
  readonly idempotency: Idempotency;
  /** TCP connections to servers inside a session (engine/ports.ts). */
  readonly ports: PortService;
  /** Signed, expiring links to a port (engine/port-links.ts). */
  readonly portLinks: PortLinkService;
  /** Terminals (engine/terminals.ts): PTYs kept in the sandbox, headless screen models and clients here. */
  readonly terminals: TerminalService;
  /** Watch-only links to one session's console view (engine/watch-links.ts). */
  readonly watchLinks: WatchLinkService;
  /** The desktop's VNC server for the console's live view (engine/vnc.ts). */
  readonly vnc: VncService;
  /** A desktop's screen and its recording (engine/desktop-recording.ts). */
  readonly desktop: DesktopService;

  get auditProofs(): AuditProofs | undefined {
    return this.o.auditProofs;
  }

  constructor(private readonly o: SessionManagerOptions) {
    const k = (this.k = new SessionKernel(o));
    this.idempotency = k.idempotency;
    this.requests = k.requests;
    this.hibernation = new Hibernation(k);
    this.machines = new Machines({ kernel: k, hibernation: this.hibernation, forget: async (id) => {
      await this.terminals.forget(id);
      await this.gate.screenshots.forget(id);
    } });
    this.snapshots = new Snapshots(k, this.hibernation);
    this.tenancy = new Tenancy(k);
    const machines = this.machines;
    // The gate reaches machines only through these (engine/sandbox-access.ts); they audit nothing themselves.
    const sandboxes = sandboxAccess({
      live: (id, opts) => machines.live(SYSTEM, id, opts),
      spawn: (id, l, req, opts) => machines.spawn(id, newId('exec'), l.d, l.sandboxId, req, opts),
      meter: (id, f) => k.bump(id, f),
      state: async (id) => (await o.store.sessions.get(id))?.state,
      pause: (id) => machines.pause(SYSTEM, id),
      resume: (p, id) => machines.resume(p, id),
    });
    const steps: ProcessSteps = {
      live: async (p, id, opts) => {
        const { r, d, sandboxId } = await machines.live(p, id, opts);
        return { tenantId: r.tenantId, d, sandboxId };
      },
      audit: (p, tenantId, id, action, data) => k.audit(p, tenantId, id, action, 'ok', data),
      meter: (id, f) => k.bump(id, f),
    };
    this.processes = processService(steps);
    this.files = fileService(steps);
    this.gate = new ToolGate({ screenshots: new ScreenshotStore(o.desktopDir ?? join(tmpdir(), 'berth-desktop')), store: o.store, audit: this.requests.log, clock: o.clock, sandboxes, log: o.log, limits: o.gateLimits, meter: (id, f) => k.bump(id, f), egressQuota: (id) => this.checkEgressQuota(id) });
    k.attachGate(this.gate);
    for (const d of Object.values(o.drivers)) d?.onExit((sandboxId, reason, last) => void machines.onSandboxExit(sandboxId, reason, last));
    this.templates = templateService({
      store: o.store,
      gate: this.gate,
      tenantFor: (p, t) => tenantFor(o.store, p, t),
      createSession: (p, input, opts) => this.createSession(p, input, opts),
      startFrom: (p, snap, input, opts) => this.snapshots.startFrom(p, snap, input, opts),
      capture: (id, fields, opts) => this.snapshots.capture(id, fields, opts),
      terminate: (id) => this.terminateSession(SYSTEM, id),
      tap: (id, fn) => machines.tap(id, fn),
      removeSnapshot: (snap) => k.removeSnapshot(snap),
      audit: (p, tenantId, sessionId, action, outcome, data) => k.audit(p, tenantId, sessionId, action, outcome, data),
    });
    this.ports = portService(steps);
    const session = async (p: Principal, id: string) => {
      requireOperator(p, id);
      return k.record(p, id);
    };
    this.portLinks = portLinkService({ store: o.store, clock: o.clock, ports: this.ports, session, audit: steps.audit });
    const watchLive: ProcessSteps['live'] = async (p, id, opts) => {
      await k.record(p, id); // the watcher's own session, in its tenant: else not found
      const { r, d, sandboxId } = await machines.live(SYSTEM, id, opts);
      return { tenantId: r.tenantId, d, sandboxId };
    };
    const tickets = new TicketStore(() => o.clock.now());
    this.terminals = terminalService({
      ...steps,
      recordDir: o.terminalRecordDir ?? join(tmpdir(), 'berth-terminals'),
      now: () => o.clock.now(),
      check: async (p, id) => {
        requireOperator(p, id);
        await k.record(p, id);
      },
      watchLive,
      leaseHolder: async (id) => (await this.gate.control.current(id))?.holder ?? null,
      tickets,
    });
    this.vnc = vncService({
      // Only vnc.ts reaches this port service, for DESKTOP_VNC_PORT alone, after its own check of p.
      ports: portService({ ...steps, live: (p, id, opts) => (p.kind === 'watcher' ? watchLive(p, id, opts) : steps.live(p, id, opts)) }),
      session: (p, id) => k.record(p, id),
      leaseHolder: (id) => this.gate.control.holderNow(id),
      tickets,
    });
    this.watchLinks = watchLinkService({
      store: o.store,
      clock: o.clock,
      operatorSession: async (p, id) => {
        requireOperator(p, id);
        return { tenantId: (await k.record(p, id)).tenantId };
      },
      audit: async (p, tenantId, id, action, data) => void (await k.audit(p, tenantId, id, action, 'ok', data)),
      revoked: (l) => {
        this.terminals.closeWatchers(l.sessionId);
        this.vnc.closeWatchers(l.sessionId);
      },
    });
    this.gate.control.onChange((id, holder) => this.terminals.leaseChanged(id, holder));
    this.desktop = desktopService({ session, live: (p, id, opts) => machines.live(p, id, opts), audit: steps.audit, meter: steps.meter });
  }

  /** Call once, before anything else: creates the default tenant on a new store and starts the gate. */
  async start(): Promise<void> {
    await this.tenancy.ensureDefaultTenant();
    await this.gate.start();
  }

  // ---- principals and tenants (engine/tenancy.ts) ---------------------------------------------------

  authenticate(token: string): Promise<Principal> {
    return authenticate(this.o.store, this.o.rootKeyHash, token);
  }

  createTenant(p: Principal, name: string): Promise<{ tenant: TenantRecord; apiKey: string }> {
    return this.tenancy.createTenant(p, name);
  }

  listTenants(p: Principal): Promise<TenantRecord[]> {
    return this.tenancy.listTenants(p);
  }

  /** Root sees every tenant, an operator its own; agents are refused. */
  getTenant(p: Principal, tenantId: string): Promise<TenantInfo> {
    return this.tenancy.getTenant(p, tenantId);
  }

  /** Root only: sets the given limits (the rest keep theirs); a limit below the current use is allowed and stops new use. */
  setTenantQuotas(p: Principal, tenantId: string, input: Partial<Record<keyof TenantQuotas, unknown>>): Promise<TenantInfo> {
    return this.tenancy.setTenantQuotas(p, tenantId, input);
  }

  /** The egress proxy's hook: throws 429 quota_exceeded once the session's tenant used its maxEgressGb. */
  checkEgressQuota(sessionId: string): Promise<void> {
    return this.tenancy.checkEgressQuota(sessionId);
  }

  /** Writes pending metering and activity now (they are otherwise written at most once a second). */
  flush(): Promise<void> {
    return this.k.flush();
  }

  // ---- sessions and their machines (engine/machines.ts) ---------------------------------------------

  async createSession(p: Principal, input: CreateSessionInput, opts: CallOptions = {}): Promise<{ session: SessionInfo; agentToken: string }> {
    requireOperator(p);
    if (input.template !== undefined) return this.templates.createSession(p, input, opts);
    return this.machines.create(p, input, opts);
  }

  listSessions(p: Principal, filter: SessionListFilter = {}): Promise<SessionInfo[]> {
    return this.machines.list(p, filter);
  }

  getSession(p: Principal, id: string): Promise<SessionInfo> {
    return this.machines.get(p, id);
  }

  terminateSession(p: Principal, id: string, opts: CallOptions = {}): Promise<void> {
    return this.machines.terminate(p, id, opts);
  }

  exec(p: Principal, id: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ execId: string; handle: ExecHandle }> {
    return this.machines.exec(p, id, req, opts);
  }

  getExec(p: Principal, sessionId: string, execId: string): Promise<ExecHandle> {
    return this.machines.getExec(p, sessionId, execId);
  }

  readFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    return this.machines.readFile(p, id, path, opts);
  }

  writeFile(p: Principal, id: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number; parents?: boolean } = {}): Promise<number> {
    return this.machines.writeFile(p, id, path, data, opts);
  }

  listFiles(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    return this.machines.listFiles(p, id, path, opts);
  }

  statFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileStat> {
    return this.machines.statFile(p, id, path, opts);
  }

  mkdir(p: Principal, id: string, path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    return this.machines.mkdir(p, id, path, opts);
  }

  removeFile(p: Principal, id: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    return this.machines.removeFile(p, id, path, opts);
  }

  pause(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.machines.pause(p, id, opts);
  }

  resume(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.machines.resume(p, id, opts);
  }

  // ---- hibernation (engine/hibernation.ts) ------------------------------------------------------------

  hibernate(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.hibernation.hibernate(p, id, opts);
  }

  wake(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.hibernation.wake(p, id, opts);
  }

  /** Hibernates sessions idle past their idleTimeoutS. Called by a timer; tests call it with a fake clock. */
  sweepIdle(): Promise<string[]> {
    return this.hibernation.sweepIdle();
  }

  // ---- snapshots and fork (engine/snapshots.ts) -----------------------------------------------------

  snapshot(p: Principal, id: string, opts: CallOptions & { name?: string } = {}): Promise<SnapshotRecord> {
    return this.snapshots.snapshot(p, id, opts);
  }

  listSnapshots(p: Principal, filter: { sessionId?: string } = {}): Promise<SnapshotRecord[]> {
    return this.snapshots.list(p, filter);
  }

  getSnapshot(p: Principal, snapshotId: string): Promise<SnapshotRecord> {
    return this.snapshots.get(p, snapshotId);
  }

  deleteSnapshot(p: Principal, snapshotId: string): Promise<void> {
    return this.snapshots.delete(p, snapshotId);
  }

  fork(p: Principal, snapshotId: string, count: number, opts: CallOptions = {}): Promise<Array<{ session: SessionInfo; agentToken: string }>> {
    return this.snapshots.fork(p, snapshotId, count, opts);
  }

  // ---- audit and health -----------------------------------------------------------------------------

  auditQuery(p: Principal, q: { sessionId?: string; afterSeq?: number; limit?: number }): Promise<AuditEntry[]> {
    return this.tenancy.auditQuery(p, q);
  }

  recordConsoleAction(p: Principal, e: { action: string; outcome: string; data: Record<string, unknown> }): Promise<void> {
    return this.tenancy.recordConsoleAction(p, e);
  }

  auditVerify(p: Principal): Promise<VerifyResult> {
    return this.tenancy.auditVerify(p);
  }

  health(): { ok: boolean; backends: Record<string, { available: boolean; reason?: string }> } {
    const backends: Record<string, { available: boolean; reason?: string }> = {};
    for (const b of BACKENDS) {
      backends[b] = this.o.drivers[b] ? { available: true } : { available: false, reason: this.o.unavailable?.[b] ?? 'not configured' };
    }
    return { ok: !this.closed, backends };
  }

  // ---- recovery and shutdown ------------------------------------------------------------------------

  /** The principal used by recovery and timers. */
  get systemPrincipal(): Principal {
    return SYSTEM;
  }

  /** For recovery (engine/recovery.ts): a lock-held step on one record. */
  withRecord(id: string, fn: (r: SessionRecord, tools: RecordTools) => Promise<void>): Promise<void> {
    return this.k.withRecord(id, fn);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.terminals.close();
    this.k.stopFlushing();
    await this.k.flush();
    await this.idempotency.drain(); // answers sent and still being kept
    await this.requests.close().catch((e: unknown) => this.o.log?.(`refusal audit flush failed: ${(e as Error).message}`));
    for (const d of Object.values(this.o.drivers)) await d?.close();
  }
}

export { SandboxError };
