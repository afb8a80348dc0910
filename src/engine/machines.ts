/**
 * Machines: a session's sandbox from create to terminate, and what runs in it (commands, files, pause and
 * resume). A call that needs the machine finds it through live(), which wakes a hibernated session first.
 */
import {
  assertVerb,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  ASLEEP_STATES,
  LISTED_STATES,
  LIVE_STATES,
  newId,
  type CallOptions,
  type ExecEvent,
  type ExecHandle,
  type ExecRequest,
  type FileEntry,
  type FileStat,
  type Principal,
  type SandboxDriver,
  type SandboxStats,
  type SessionRecord,
  type SessionState,
} from '../core/index.js';
import { normalizeEgressAllow, normalizeEgressCidrs } from '../policy/index.js';
import type { CreateSessionInput, SessionInfo, SessionListFilter } from './api.js';
import { newAgentToken } from './auth.js';
import { startDesktop } from './desktop.js';
import type { Hibernation } from './hibernation.js';
import type { SessionKernel } from './kernel.js';
import { countBytes, foldStats, meteredExec } from './metering.js';
import { resolveSettings } from './options.js';
import { newSessionRecord, sandboxIdFor } from './records.js';
import { tapExec } from './templates.js';
import { requireOperator, tenantFilter, tenantFor } from './visibility.js';

export interface MachinesOptions {
  kernel: SessionKernel;
  hibernation: Hibernation;
  /** Called under the session lock once a session is terminated: what else it held goes (its terminals). */
  forget: (sessionId: string) => Promise<void>;
}

export class Machines {
  private readonly k: SessionKernel;
  private readonly hib: Hibernation;
  private readonly execs = new Map<string, { sessionId: string; handle: ExecHandle }>();
  /** Observers of a session's command output (a template build's live log). */
  private readonly taps = new Map<string, (ev: ExecEvent) => void>();

  constructor(private readonly opts: MachinesOptions) {
    this.k = opts.kernel;
    this.hib = opts.hibernation;
  }

  /** Observes every command started in the session from now on; returns the way to stop. */
  tap(id: string, fn: (ev: ExecEvent) => void): () => void {
    this.taps.set(id, fn);
    return () => {
      if (this.taps.get(id) === fn) this.taps.delete(id);
    };
  }

  // ---- create / list / terminate --------------------------------------------------------------------

  /** A session on the base image (SessionManager.createSession hands template sessions to engine/templates.ts). */
  async create(p: Principal, input: CreateSessionInput, opts: CallOptions = {}): Promise<{ session: SessionInfo; agentToken: string }> {
    const k = this.k;
    requireOperator(p);
    const { settings, backend } = resolveSettings(input, k.defaults);
    const tenantId = await tenantFor(k.o.store, p, input.tenantId);
    if (input.objective !== undefined && (typeof input.objective !== 'string' || input.objective.length > 4096)) {
      throw new InvalidArgumentError('objective: a string of at most 4096 characters', { details: { field: 'objective' } });
    }
    // Checked before anything exists, so a bad entry leaves nothing behind.
    const egressAllow = input.egressAllow === undefined ? undefined : normalizeEgressAllow(input.egressAllow, 'egressAllow');
    const egressAllowCidr = input.egressAllowCidr === undefined ? undefined : normalizeEgressCidrs(input.egressAllowCidr, 'egressAllowCidr');
    const driver = k.driver(backend);
    if (settings.desktop && !driver.capabilities.images.includes('desktop')) {
      throw new InvalidArgumentError(`desktop: the ${backend} backend cannot run desktops on this server`, { details: { field: 'desktop', backend } });
    }
    const id = newId('session');
    await k.idempotency.note(id); // before the record exists: a retry after a crash finds it (engine/idempotency.ts)
    const agentToken = newAgentToken(id);
    const now = k.o.clock.now();
    const r = newSessionRecord({ id, tenantId, backend, settings, objective: input.objective ?? null, metadata: input.metadata ?? {}, agentToken, reason: 'create', parentSnapshotId: null, now });
    // Check and insert under the tenant's lock, so two creates cannot both pass the last free place.
    await k.mutex.run(`tenant:${tenantId}`, async () => {
      await k.checkQuota(tenantId, { sessions: 1, memoryMb: settings.memoryMb });
      await k.o.store.sessions.insert(r);
    });
    await k.audit(p, tenantId, id, 'session.create', 'ok', { backend, settings: { ...settings, env: Object.keys(settings.env) }, objective: r.objective });
    if (egressAllow || egressAllowCidr) {
      await k.gate.setGate(p, id, { ...(egressAllow ? { egressAllow } : {}), ...(egressAllowCidr ? { egressAllowCidr } : {}) });
    }
    await k.bringUp(r, driver, async () => {
      await driver.create(k.spec(r, r.sandboxId as string, r.identity), opts);
      if (settings.desktop) await startDesktop(driver, r.sandboxId as string, settings.desktop, opts);
    });
    return { session: await k.info(r), agentToken };
  }

  async list(p: Principal, filter: SessionListFilter = {}): Promise<SessionInfo[]> {
    requireOperator(p);
    const states = (filter.states?.length ? filter.states : LISTED_STATES) as readonly SessionState[];
    const rows = await this.k.o.store.sessions.list({ states, ...tenantFilter(p) });
    return Promise.all(rows.map((r) => this.k.info(r)));
  }

  async get(p: Principal, id: string): Promise<SessionInfo> {
    if (p.kind !== 'watcher') requireOperator(p, id); // a watcher reads its session (record() scopes it)
    return this.k.info(await this.k.record(p, id));
  }

  async terminate(p: Principal, id: string, opts: CallOptions = {}): Promise<void> {
    const k = this.k;
    requireOperator(p, id);
    await k.record(p, id);
    await k.mutex.run(id, async () => {
      const r = await k.record(p, id);
      if (r.state === 'terminated') return;
      await k.audit(p, r.tenantId, id, 'session.terminate', 'ok', {});
      for (const [execId, e] of this.execs) if (e.sessionId === id) this.execs.delete(execId);
      const d = k.driver(r.backend);
      if (r.sandboxId) foldStats(r, await d.stats(r.sandboxId).catch(() => undefined));
      // Also the last incarnation when hibernated: its removal may still be finishing in the background.
      await d.destroy(r.sandboxId ?? sandboxIdFor(r.id, r.identity.generation), opts);
      // The session's own snapshots go with it, named or not, except named ones (kept for forking).
      for (const s of await k.o.store.snapshots.list({ sessionId: id })) {
        if (s.kind === 'hibernation' || (s.kind === 'named' && s.name === null)) await k.removeSnapshot(s);
      }
      // Its pending approvals close with it (cancelled), so none is left to approve.
      await k.o.store.transaction(async () => {
        await k.gate.cancelPendingApprovals(id);
        k.gate.control.drop(id);
        await k.transition(r, 'terminated', { sandboxId: null, hibernationSnapshotId: null });
      });
      await this.opts.forget(id); // screens and recordings go with the session
    });
  }

  /** A machine that died by itself (OOM, a crash): the session fails, keeping the dead incarnation's figures. */
  async onSandboxExit(sandboxId: string, reason: string, last?: SandboxStats): Promise<void> {
    const k = this.k;
    const r = (await k.o.store.sessions.list({ states: LIVE_STATES })).find((s) => s.sandboxId === sandboxId);
    if (!r) return;
    await k.mutex.run(r.id, async () => {
      const cur = await k.o.store.sessions.get(r.id);
      if (!cur || cur.sandboxId !== sandboxId || (cur.state !== 'running' && cur.state !== 'paused')) return;
      await k.driver(cur.backend).destroy(sandboxId).catch(() => undefined);
      // The dead incarnation's figures (peak memory above all, for an OOM) stay in the metering.
      foldStats(cur, last);
      await k.transition(cur, 'failed', { failureReason: reason, sandboxId: null });
    });
  }

  // ---- making sure a machine is there ----------------------------------------------------------------

  /** The live sandbox of a session for a command or file call; wakes a hibernated session first. */
  async live(p: Principal, id: string, opts: CallOptions): Promise<{ r: SessionRecord; d: SandboxDriver; sandboxId: string }> {
    requireOperator(p, id);
    let r = await this.k.record(p, id);
    if (ASLEEP_STATES.includes(r.state)) {
      await this.hib.wake(p, id, opts);
      r = await this.k.record(p, id);
    }
    if (r.state === 'paused') throw new InvalidStateError(`session ${id} is paused; resume it first`, { details: { state: r.state } });
    if (r.state !== 'running' || !r.sandboxId) {
      throw new InvalidStateError(`session ${id} is ${r.state}${r.failureReason ? ` (${r.failureReason})` : ''}`, { details: { state: r.state } });
    }
    this.k.bump(id, {});
    return { r, d: this.k.driver(r.backend), sandboxId: r.sandboxId };
  }

  // ---- commands --------------------------------------------------------------------------------------

  async exec(p: Principal, id: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ execId: string; handle: ExecHandle }> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    const execId = newId('exec');
    await this.k.audit(p, r.tenantId, id, 'session.exec', 'ok', { execId, argv: req.argv, cwd: req.cwd ?? null, timeoutMs: req.timeoutMs ?? null });
    return { execId, handle: await this.spawn(id, execId, d, sandboxId, req, opts) };
  }

  /** Starts a command in a live sandbox, metered, and registers it under execId. */
  async spawn(id: string, execId: string, d: SandboxDriver, sandboxId: string, req: ExecRequest, opts: CallOptions): Promise<ExecHandle> {
    const k = this.k;
    const tap = this.taps.get(id);
    const raw = tap ? tapExec(await d.exec(sandboxId, req, opts), tap) : await d.exec(sandboxId, req, opts);
    const release = this.hib.hold(id); // a streaming command keeps the session from idling
    const handle = meteredExec(raw, {
      in: (n) => k.bump(id, { bytesIn: n }),
      out: (n) => k.bump(id, { bytesOut: n }),
      end: () => {
        this.execs.delete(execId);
        release();
        k.bump(id, {});
      },
    });
    k.bump(id, { execCount: 1 });
    this.execs.set(execId, { sessionId: id, handle });
    return handle;
  }

  async getExec(p: Principal, sessionId: string, execId: string): Promise<ExecHandle> {
    requireOperator(p, sessionId);
    await this.k.record(p, sessionId);
    const e = this.execs.get(execId);
    if (!e || e.sessionId !== sessionId) throw new NotFoundError('exec', execId);
    return e.handle;
  }

  // ---- files -----------------------------------------------------------------------------------------

  async readFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    const { d, sandboxId } = await this.live(p, id, opts);
    const src = await d.readFile(sandboxId, checkPath(path), opts);
    return countBytes(src, (n) => this.k.bump(id, { bytesOut: n }));
  }

  async writeFile(p: Principal, id: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number; parents?: boolean } = {}): Promise<number> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    // Missing parent directories are made first (as E2B's write does), unless the caller asks for the strict form.
    if (opts.parents !== false && checkPath(path).lastIndexOf('/') > 0) await d.mkdir(sandboxId, path.slice(0, path.lastIndexOf('/')), { ...opts, parents: true });
    const n = await d.writeFile(sandboxId, checkPath(path), countBytes(data, (k) => this.k.bump(id, { bytesIn: k })), opts);
    await this.k.audit(p, r.tenantId, id, 'session.files.write', 'ok', { path, bytes: n });
    return n;
  }

  async listFiles(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    const { d, sandboxId } = await this.live(p, id, opts);
    return d.listFiles(sandboxId, checkPath(path), opts);
  }

  async statFile(p: Principal, id: string, path: string, opts: CallOptions = {}): Promise<FileStat> {
    const { d, sandboxId } = await this.live(p, id, opts);
    return d.stat(sandboxId, checkPath(path), opts);
  }

  async mkdir(p: Principal, id: string, path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    await d.mkdir(sandboxId, checkPath(path), opts);
    await this.k.audit(p, r.tenantId, id, 'session.files.mkdir', 'ok', { path });
  }

  async removeFile(p: Principal, id: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    const { r, d, sandboxId } = await this.live(p, id, opts);
    await d.remove(sandboxId, checkPath(path), opts);
    await this.k.audit(p, r.tenantId, id, 'session.files.remove', 'ok', { path, recursive: !!opts.recursive });
  }

  // ---- pause / resume ----------------------------------------------------------------------------------

  async pause(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.k.lifecycle(p, id, 'session.pause', async (r, by) => {
      assertVerb('pause', id, r.state);
      await this.k.driver(r.backend).pause(r.sandboxId as string, opts);
      await this.k.transition(r, 'paused', {}, by);
    });
  }

  async resume(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.k.lifecycle(p, id, 'session.resume', async (r, by) => {
      assertVerb('resume', id, r.state);
      await this.k.driver(r.backend).resume(r.sandboxId as string, opts);
      await this.k.transition(r, 'running', {}, by);
    });
  }
}

function checkPath(path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0') || path.length > 4096) {
    throw new InvalidArgumentError('path: must be an absolute path', { details: { field: 'path' } });
  }
  return path;
}
