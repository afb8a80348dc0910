/**
 * The session kernel: what every room of the engine (machines, hibernation, snapshots, tenancy) shares.
 * The record as a principal may see it, the session lock, the one way a state changes (transition(), with
 * its audit entry in the same transaction), audit appends, the driver of a backend, the spec of a sandbox,
 * metering and quotas. Rooms depend on this file; it depends on no room and not on SessionManager.
 */
import {
  DESKTOP_DISPLAY,
  AppError,
  UnavailableError,
  assertTransition,
  type AuditEntry,
  type AuditLog,
  type BackendName,
  type Clock,
  type Principal,
  type SandboxDriver,
  type SandboxIdentity,
  type SandboxSpec,
  type SessionRecord,
  type SessionState,
  type SnapshotRecord,
  type SnapshotStore,
  type Store,
  type TenantQuotas,
  type VerifyResult,
} from '../core/index.js';
import type { SessionInfo } from './api.js';
import type { AuditProofs } from './audit-proofs.js';
import { EGRESS_PORT, egressEnv } from './egress.js';
import type { ToolGate, ToolGateOptions } from './gate.js';
import { Idempotency } from './idempotency.js';
import { KeyedMutex } from './lock.js';
import { PendingMeter, enterState, liveMetering, type PendingCounts } from './metering.js';
import { DEFAULT_SESSION, resolveForkConcurrency, validateDefaults, type SessionDefaults } from './options.js';
import { DEFAULT_QUOTAS, checkQuota, effectiveQuotas, tenantUsage, validateQuotaDefaults, type QuotaAsk, type TenantUsage } from './quotas.js';
import { RequestAudit } from './request-audit.js';
import { requireOperator, visibleSession } from './visibility.js';

export interface SessionManagerOptions {
  store: Store;
  audit: AuditLog;
  /** Verifies the audit chain (with whatever anchor the store keeps). Default: verifyChain over scan(). */
  verifyAudit?: () => Promise<VerifyResult>;
  snapshots: SnapshotStore;
  /** Backends available on this machine; a session naming a missing one is refused. */
  drivers: Partial<Record<BackendName, SandboxDriver>>;
  /** SHA-256 (hex) of the root operator token. */
  rootKeyHash: string;
  clock: Clock;
  defaults?: Partial<SessionDefaults>;
  /** Fork branches restored at once. Default 4. */
  forkConcurrency?: number;
  /** Why a configured backend is unavailable (shown by health()). */
  unavailable?: Partial<Record<BackendName, string>>;
  log?: (line: string) => void;
  /** Executor limits of the tool gate (see engine/gate.ts). */
  gateLimits?: ToolGateOptions['limits'];
  /** Checkpoints and proofs over the audit tree; undefined when the server has no audit key. */
  auditProofs?: AuditProofs;
  /** Requests a second let through for a principal whose gated calls meet an open breaker. Default 10. */
  refusalsPerSecond?: number;
  /** Quotas of tenants root has not set (per field). Default DEFAULT_QUOTAS (engine/quotas.ts). */
  quotaDefaults?: TenantQuotas;
  /** Where terminal recordings go. Default: a berth-terminals folder in the OS temp dir. */
  terminalRecordDir?: string;
  /** Where desktop screenshots are kept (`<dataDir>/desktop`). Default: a folder under the system's tmpdir. */
  desktopDir?: string;
}

export const SYSTEM: Principal = { kind: 'system', id: 'system', tenantId: null };

/** Who asked for a lifecycle step; its final transition records it (see lifecycle()). */
export interface Actor {
  principal: Principal;
  action: string;
  audited: boolean;
}

/** What a lock-held step on one record may do (recovery, engine/recovery.ts and engine/hibernation.ts). */
export interface RecordTools {
  transition: (to: SessionState, patch?: Partial<SessionRecord>) => Promise<void>;
  spec: (sandboxId: string) => SandboxSpec;
  driver: SandboxDriver | undefined;
  listenEgress: () => Promise<void>;
}

/** Metering and activity are flushed at most this often; state changes are written at once. */
const FLUSH_INTERVAL_MS = 1000;

export class SessionKernel {
  /** Lifecycle steps of one session (key: its id) and quota checks of one tenant (key: `tenant:<id>`). */
  readonly mutex = new KeyedMutex();
  readonly meter = new PendingMeter();
  private flushTimer: NodeJS.Timeout | undefined;
  readonly defaults: SessionDefaults;
  readonly forkConcurrency: number;
  readonly quotaDefaults: TenantQuotas;
  /** Idempotency-Key records (engine/idempotency.ts); the engine notes what it creates on the key in scope. */
  readonly idempotency: Idempotency;
  /** Every request with its principal; its log is the one the engine and the gate append to. */
  readonly requests: RequestAudit;
  private toolGate: ToolGate | undefined;

  constructor(readonly o: SessionManagerOptions) {
    this.defaults = validateDefaults({ ...DEFAULT_SESSION, ...o.defaults });
    this.forkConcurrency = resolveForkConcurrency(o.forkConcurrency);
    this.quotaDefaults = validateQuotaDefaults(o.quotaDefaults ?? DEFAULT_QUOTAS);
    this.idempotency = new Idempotency({ store: o.store, clock: o.clock, ...(o.log ? { log: o.log } : {}) });
    this.requests = new RequestAudit({ audit: o.audit, clock: o.clock, ...(o.refusalsPerSecond !== undefined ? { refusalsPerSecond: o.refusalsPerSecond } : {}), ...(o.log ? { log: o.log } : {}) });
  }

  /** The tool gate. It is built over the rooms, which are built over the kernel, so it is attached after both. */
  get gate(): ToolGate {
    if (!this.toolGate) throw new AppError('internal', 'the tool gate is not attached to the session kernel yet');
    return this.toolGate;
  }

  attachGate(gate: ToolGate): void {
    if (this.toolGate) throw new AppError('internal', 'the tool gate is already attached');
    this.toolGate = gate;
  }

  // ---- records ------------------------------------------------------------------------------------

  /** The session as this principal may see it; another tenant's session is simply not found (engine/visibility.ts). */
  record(p: Principal, id: string): Promise<SessionRecord> {
    return visibleSession(this.o.store, p, id);
  }

  private async save(r: SessionRecord): Promise<void> {
    await this.o.store.sessions.put(r);
  }

  bump(id: string, f: Partial<PendingCounts>): void {
    this.meter.add(id, f, this.o.clock.now());
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = undefined;
      void this.flush().catch((e: unknown) => this.o.log?.(`metering flush failed: ${(e as Error).message}`));
    }, FLUSH_INTERVAL_MS).unref();
  }

  async flush(): Promise<void> {
    for (const id of this.meter.ids()) {
      const r = await this.o.store.sessions.get(id);
      if (r) await this.o.store.sessions.put(this.meter.apply(r));
    }
  }

  /** Stops the flush timer (close() then flushes once more itself). */
  stopFlushing(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
  }

  /**
   * Moves a record to a new state and writes it with its audit entry in one transaction (one commit,
   * one fsync). `by` names who asked for it; without it the entry is the system's.
   */
  async transition(r: SessionRecord, to: SessionState, patch: Partial<SessionRecord> = {}, by?: Actor): Promise<void> {
    assertTransition(r.state, to);
    const from = r.state;
    this.meter.apply(r);
    enterState(r, to, this.o.clock.now());
    Object.assign(r, patch);
    // The environment's values are secrets: an ended session keeps their names only.
    if (to === 'terminated') r.settings = { ...r.settings, env: Object.fromEntries(Object.keys(r.settings.env).map((k) => [k, ''])) };
    const data = { from, to, ...(patch.failureReason ? { reason: patch.failureReason } : {}) };
    await this.o.store.transaction(async () => {
      await this.save(r);
      if (by) {
        await this.audit(by.principal, r.tenantId, r.id, by.action, 'ok', data);
        by.audited = true;
      } else {
        await this.audit(SYSTEM, r.tenantId, r.id, 'session.state', 'ok', data);
      }
    });
    if (to === 'running') await this.listenEgress(r);
  }

  /**
   * Asks the agent to listen for the session's proxy (engine/egress.ts) and hands each connection to the
   * egress gate. Every incarnation needs it (create, wake, fork, resume, a restart's adoption): the driver's
   * handler is per sandbox and per server process. A failure is logged, not fatal: the session runs
   * without egress, which is what it would have without the proxy.
   */
  async listenEgress(r: SessionRecord): Promise<void> {
    const sandboxId = r.sandboxId;
    const d = this.o.drivers[r.backend];
    if (!sandboxId || !d) return;
    const id = r.id;
    try {
      await d.listenTcp(sandboxId, EGRESS_PORT, (sock) => void this.gate.egress.serve(id, sock));
    } catch (e) {
      this.o.log?.(`egress: the proxy listener of ${id} could not start: ${(e as Error).message}`);
    }
  }

  audit(p: Principal, tenantId: string | null, sessionId: string | null, action: string, outcome: string, data: Record<string, unknown>): Promise<AuditEntry> {
    return this.requests.log.append({ tenantId, sessionId, principal: p, action, outcome, data });
  }

  driver(backend: BackendName): SandboxDriver {
    const d = this.o.drivers[backend];
    if (!d) throw new UnavailableError(`the ${backend} backend is not available on this server${this.o.unavailable?.[backend] ? `: ${this.o.unavailable[backend]}` : ''}`);
    return d;
  }

  spec(r: SessionRecord, sandboxId: string, identity: SandboxIdentity): SandboxSpec {
    // No network device: the proxy variables point at the agent's loopback listener (engine/egress.ts).
    const desktop: Record<string, string> = r.settings.desktop ? { DISPLAY: DESKTOP_DISPLAY } : {};
    return {
      sandboxId,
      limits: { memoryMb: r.settings.memoryMb, cpus: r.settings.cpus, ...(r.settings.diskMb ? { diskMb: r.settings.diskMb } : {}) },
      env: { ...egressEnv(), ...desktop, ...r.settings.env },
      identity,
      network: 'none',
      image: r.settings.desktop ? 'desktop' : 'base',
    };
  }

  async info(r: SessionRecord): Promise<SessionInfo> {
    const live = r.sandboxId && (r.state === 'running' || r.state === 'paused')
      ? await this.driver(r.backend).stats(r.sandboxId).catch(() => undefined)
      : undefined;
    return liveMetering(this.meter.peek(r), live);
  }

  async removeSnapshot(s: SnapshotRecord): Promise<void> {
    await this.o.snapshots.delete(s.id);
    await this.o.store.snapshots.delete(s.id);
  }

  /**
   * Runs a lifecycle step under the session lock and returns the fresh view. The step passes `by` to its
   * final transition, which then carries the caller's audit entry; a step without one is audited here.
   */
  async lifecycle(p: Principal, id: string, action: string, fn: (r: SessionRecord, by: Actor) => Promise<void>): Promise<SessionInfo> {
    requireOperator(p, id);
    await this.record(p, id);
    return this.mutex.run(id, async () => {
      const r = await this.record(p, id);
      const by: Actor = { principal: p, action, audited: false };
      try {
        await fn(r, by);
        if (!by.audited) await this.audit(p, r.tenantId, id, action, 'ok', {});
      } catch (e) {
        await this.audit(p, r.tenantId, id, action, 'error', { code: (e as AppError).code ?? 'internal', message: (e as Error).message });
        throw e;
      }
      return this.info(r);
    });
  }

  /** For recovery (engine/recovery.ts): a lock-held step on one record. */
  /**
   * Starts a new session's machine under its lock (`start`: the driver's create or restore). It ends
   * running, or failed with the reason and its sandbox destroyed, and the error is rethrown.
   */
  async bringUp(r: SessionRecord, d: SandboxDriver, start: () => Promise<void>): Promise<void> {
    await this.mutex.run(r.id, async () => {
      try {
        await start();
        await this.transition(r, 'running');
      } catch (e) {
        await d.destroy(r.sandboxId as string).catch(() => undefined);
        await this.transition(r, 'failed', { failureReason: `create failed: ${(e as Error).message}`, sandboxId: null });
        throw e;
      }
    });
  }

  async withRecord(id: string, fn: (r: SessionRecord, tools: RecordTools) => Promise<void>): Promise<void> {
    await this.mutex.run(id, async () => {
      const r = await this.o.store.sessions.get(id);
      if (!r) return;
      await fn(r, {
        transition: (to, patch) => this.transition(r, to, patch),
        spec: (sandboxId) => this.spec(r, sandboxId, r.identity),
        driver: this.o.drivers[r.backend],
        listenEgress: () => this.listenEgress(r),
      });
    });
  }

  // ---- quotas (issue 12 §3) ------------------------------------------------------------------------

  async usage(tenantId: string): Promise<{ quotas: TenantQuotas; usage: TenantUsage }> {
    const t = await this.o.store.tenants.get(tenantId);
    const [sessions, snapshots] = await Promise.all([this.o.store.sessions.list({ tenantId }), this.o.store.snapshots.list({ tenantId })]);
    return { quotas: effectiveQuotas(t?.quotas, this.quotaDefaults), usage: tenantUsage(sessions, snapshots) };
  }

  /** Throws 429 quota_exceeded when the ask would pass one of the tenant's limits. */
  async checkQuota(tenantId: string, ask: QuotaAsk): Promise<void> {
    const { quotas, usage } = await this.usage(tenantId);
    checkQuota(quotas, usage, ask);
  }
}
