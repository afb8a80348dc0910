/**
 * An in-memory Engine double for HTTP, SDK and CLI tests. No sandboxes: exec runs a handful of scripted
 * programs, files live in a Map. It follows the Engine contract closely enough that the HTTP layer can be
 * tested in isolation (errors are the same AppErrors the real engine throws).
 *
 * Programs: `echo ARGS…` · `cat` (stdin → stdout; ends when stdin closes) · `exit N` (a line on stderr,
 * then code N) · `sleep MS` · `tick N MS` (N stdout lines, MS apart) · `env NAME` · `pwd`; anything else
 * exits 127. `timeoutMs` kills with timedOut=true; the call's signal kills the command.
 */
import {
  AppError,
  GENESIS_HASH,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  assertTransition,
  emptyMetering,
  hashEntry,
  newId,
  newMachineId,
  sha256Hex,
  systemClock,
  verifyChain,
  type AuditEntry,
  type CallOptions,
  type Clock,
  type ExecEvent,
  type ExecExit,
  type ExecHandle,
  type ExecRequest,
  type FileEntry,
  type FileStat,
  type Principal,
  type SessionRecord,
  type SessionState,
  type SnapshotRecord,
  type TenantRecord,
  type VerifyResult,
} from '../../core/index.js';
import type { CreateSessionInput, Engine, SessionInfo, SessionListFilter } from '../../engine/api.js';

export const ROOT_TOKEN = 'btr_test-root-token';

interface FileNode {
  type: 'file' | 'dir';
  data: Uint8Array;
  mode: number;
  mtimeMs: number;
}

export class FakeExec implements ExecHandle {
  private queue: ExecEvent[] = [];
  private wake: (() => void) | null = null;
  private exitValue: ExecExit | null = null;
  private exitWaiters: ((x: ExecExit) => void)[] = [];
  private timers: NodeJS.Timeout[] = [];
  readonly stdinChunks: Uint8Array[] = [];
  stdinClosed = false;
  killedWith: number | null = null;

  constructor(
    readonly req: ExecRequest,
    opts: CallOptions,
  ) {
    opts.signal?.addEventListener('abort', () => void this.kill(9), { once: true });
    if (req.timeoutMs) this.later(req.timeoutMs, () => this.finish({ code: 137, signal: 9, timedOut: true }));
    this.run();
  }

  get exited(): boolean {
    return this.exitValue !== null;
  }

  private later(ms: number, fn: () => void) {
    this.timers.push(setTimeout(fn, ms));
  }
  private out(type: 'stdout' | 'stderr', s: string | Uint8Array) {
    if (this.exitValue) return;
    this.queue.push({ type, data: typeof s === 'string' ? new TextEncoder().encode(s) : s });
    this.poke();
  }
  private poke() {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
  finish(x: ExecExit) {
    if (this.exitValue) return;
    this.exitValue = x;
    for (const t of this.timers) clearTimeout(t);
    this.queue.push({ type: 'exit', exit: x });
    this.poke();
    for (const w of this.exitWaiters) w(x);
  }

  private run() {
    const [cmd, ...args] = this.req.argv;
    switch (cmd) {
      case 'echo':
        this.out('stdout', `${args.join(' ')}\n`);
        return this.finish({ code: 0, signal: null, timedOut: false });
      case 'cat':
        if (!this.req.stdin) this.finish({ code: 0, signal: null, timedOut: false });
        return;
      case 'exit':
        this.out('stderr', 'bye\n');
        return this.finish({ code: Number(args[0] ?? 0), signal: null, timedOut: false });
      case 'sleep':
        return this.later(Number(args[0] ?? 0), () => this.finish({ code: 0, signal: null, timedOut: false }));
      case 'tick': {
        const n = Number(args[0] ?? 3);
        const ms = Number(args[1] ?? 10);
        for (let i = 1; i <= n; i++) this.later(i * ms, () => this.out('stdout', `tick ${i}\n`));
        return this.later((n + 1) * ms, () => this.finish({ code: 0, signal: null, timedOut: false }));
      }
      case 'env':
        this.out('stdout', `${this.req.env?.[args[0] ?? ''] ?? ''}\n`);
        return this.finish({ code: 0, signal: null, timedOut: false });
      case 'pwd':
        this.out('stdout', `${this.req.cwd ?? '/'}\n`);
        return this.finish({ code: 0, signal: null, timedOut: false });
      default:
        this.out('stderr', `${cmd}: command not found\n`);
        return this.finish({ code: 127, signal: null, timedOut: false });
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    for (;;) {
      const ev = this.queue.shift();
      if (ev) {
        yield ev;
        if (ev.type === 'exit') return;
        continue;
      }
      await new Promise<void>((r) => (this.wake = r));
    }
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    if (!this.req.stdin) throw new InvalidStateError('the command was started without stdin');
    if (this.stdinClosed) throw new InvalidStateError('stdin is closed');
    if (this.exitValue) throw new InvalidStateError('the command has exited');
    const copy = new Uint8Array(data);
    this.stdinChunks.push(copy);
    if (this.req.argv[0] === 'cat') this.out('stdout', copy);
  }
  async closeStdin(): Promise<void> {
    this.stdinClosed = true;
    if (this.req.argv[0] === 'cat') this.finish({ code: 0, signal: null, timedOut: false });
  }
  async kill(signal = 9): Promise<void> {
    if (this.exitValue) return;
    this.killedWith = signal;
    this.finish({ code: 128 + signal, signal, timedOut: false });
  }
  wait(): Promise<ExecExit> {
    if (this.exitValue) return Promise.resolve(this.exitValue);
    return new Promise((r) => this.exitWaiters.push(r));
  }
}

export interface MemoryEngineOptions {
  clock?: Clock;
}

export class MemoryEngine implements Engine {
  readonly clock: Clock;
  readonly sessions = new Map<string, SessionRecord>();
  readonly snapshots = new Map<string, SnapshotRecord>();
  readonly tenants = new Map<string, TenantRecord>();
  readonly files = new Map<string, Map<string, FileNode>>();
  readonly execs = new Map<string, { sessionId: string; handle: FakeExec }>();
  readonly audit: AuditEntry[] = [];
  private tokens = new Map<string, Principal>([[ROOT_TOKEN, { kind: 'root', id: 'root', tenantId: null }]]);
  /** Called for every chunk writeFile receives, as it arrives (tests check uploads stream). */
  onWriteChunk: ((chunk: Uint8Array) => void | Promise<void>) | null = null;
  /** Throws a plain Error (not an AppError) from getSession for this id, to test the 500 path. */
  explodeOn: string | null = null;
  healthy = true;

  constructor(opts: MemoryEngineOptions = {}) {
    this.clock = opts.clock ?? systemClock;
  }

  authenticate(token: string): Principal {
    const p = this.tokens.get(token);
    if (!p) throw new AppError('unauthenticated', 'the bearer token is not valid');
    return p;
  }

  private log(p: Principal, sessionId: string | null, action: string, data: Record<string, unknown> = {}) {
    const prev = this.audit.at(-1);
    const body = {
      seq: this.audit.length + 1,
      ts: this.clock.now(),
      tenantId: p.tenantId,
      sessionId,
      principal: p,
      action,
      outcome: 'ok',
      data,
      prevHash: prev?.hash ?? GENESIS_HASH,
    };
    this.audit.push({ ...body, hash: hashEntry(body) });
  }

  createTenant(p: Principal, name: string): { tenant: TenantRecord; apiKey: string } {
    if (p.kind !== 'root') throw new AppError('forbidden', 'only root may create tenants');
    const apiKey = `btk_${newId('token')}`;
    const tenant: TenantRecord = { id: newId('tenant'), name, apiKeyHash: sha256Hex(apiKey), createdAt: this.clock.now() };
    this.tenants.set(tenant.id, tenant);
    this.tokens.set(apiKey, { kind: 'operator', id: tenant.id, tenantId: tenant.id });
    this.log(p, null, 'tenant.create', { tenantId: tenant.id });
    return { tenant, apiKey };
  }
  listTenants(): TenantRecord[] {
    return [...this.tenants.values()];
  }

  private newSession(p: Principal, input: CreateSessionInput, parent: SnapshotRecord | null): { session: SessionInfo; agentToken: string } {
    const now = this.clock.now();
    const id = newId('session');
    const agentToken = `bta_${id}.${newId('token')}`;
    const r: SessionRecord = {
      id,
      tenantId: input.tenantId ?? p.tenantId ?? 'default',
      backend: parent?.backend ?? input.backend ?? 'gvisor',
      state: 'running',
      objective: input.objective ?? null,
      settings: parent?.settings ?? {
        memoryMb: input.memoryMb ?? 512,
        cpus: input.cpus ?? 1,
        idleTimeoutS: input.idleTimeoutS ?? 0,
        env: input.env ?? {},
      },
      metadata: input.metadata ?? {},
      sandboxId: `sbx-${id}`,
      identity: { hostname: id.replace('_', '-'), machineId: newMachineId(), generation: parent ? 1 : 0, reason: parent ? 'fork' : 'create' },
      hibernationSnapshotId: null,
      parentSnapshotId: parent?.id ?? null,
      failureReason: null,
      agentTokenHash: sha256Hex(agentToken),
      createdAt: now,
      updatedAt: now,
      stateSince: now,
      lastActivityAt: now,
      metering: emptyMetering(),
    };
    this.sessions.set(id, r);
    this.files.set(id, new Map([['/', { type: 'dir', data: new Uint8Array(), mode: 0o755, mtimeMs: now }]]));
    this.tokens.set(agentToken, { kind: 'agent', id, tenantId: r.tenantId });
    this.log(p, id, parent ? 'session.fork' : 'session.create');
    return { session: structuredClone(r), agentToken };
  }

  async createSession(p: Principal, input: CreateSessionInput): Promise<{ session: SessionInfo; agentToken: string }> {
    if (input.backend === 'qemu') throw new AppError('unavailable', 'backend qemu is not available here', { details: { backend: 'qemu' } });
    return this.newSession(p, input, null);
  }

  private rec(p: Principal, id: string): SessionRecord {
    const r = this.sessions.get(id);
    if (!r || (p.kind === 'agent' && p.id !== id) || (p.kind === 'operator' && p.tenantId !== r.tenantId)) throw new NotFoundError('session', id);
    return r;
  }
  private live(p: Principal, id: string): SessionRecord {
    const r = this.rec(p, id);
    if (r.state !== 'running') throw new InvalidStateError(`session ${id} is ${r.state}`, { details: { state: r.state } });
    return r;
  }
  private move(r: SessionRecord, to: SessionState): SessionInfo {
    assertTransition(r.state, to);
    const now = this.clock.now();
    r.metering.stateSeconds[r.state] = (r.metering.stateSeconds[r.state] ?? 0) + (now - r.stateSince) / 1000;
    r.state = to;
    r.stateSince = now;
    r.updatedAt = now;
    return structuredClone(r);
  }

  async listSessions(p: Principal, filter: SessionListFilter = {}): Promise<SessionInfo[]> {
    return [...this.sessions.values()]
      .filter((r) => p.kind === 'root' || r.tenantId === p.tenantId)
      .filter((r) => !filter.states || filter.states.includes(r.state))
      .map((r) => structuredClone(r));
  }
  async getSession(p: Principal, id: string): Promise<SessionInfo> {
    if (id === this.explodeOn) throw new Error('database exploded at /secret/path');
    return structuredClone(this.rec(p, id));
  }
  async terminateSession(p: Principal, id: string): Promise<void> {
    const r = this.rec(p, id);
    if (r.state !== 'terminated') this.move(r, 'terminated');
  }

  async exec(p: Principal, id: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ execId: string; handle: ExecHandle }> {
    const r = this.live(p, id);
    const execId = newId('exec');
    const handle = new FakeExec({ ...req, env: { ...r.settings.env, ...req.env } }, opts);
    this.execs.set(execId, { sessionId: id, handle });
    r.metering.execCount++;
    return { execId, handle };
  }
  getExec(p: Principal, sessionId: string, execId: string): ExecHandle {
    this.rec(p, sessionId);
    const e = this.execs.get(execId);
    if (!e || e.sessionId !== sessionId) throw new NotFoundError('exec', execId);
    return e.handle;
  }

  private fs(p: Principal, id: string): Map<string, FileNode> {
    this.live(p, id);
    return this.files.get(id)!;
  }
  private node(p: Principal, id: string, path: string): FileNode {
    const n = this.fs(p, id).get(path);
    if (!n) throw new NotFoundError('file', path);
    return n;
  }
  private parentOf(path: string): string {
    const i = path.lastIndexOf('/');
    return i <= 0 ? '/' : path.slice(0, i);
  }

  async readFile(p: Principal, id: string, path: string): Promise<AsyncIterable<Uint8Array>> {
    const n = this.node(p, id, path);
    if (n.type !== 'file') throw new InvalidArgumentError(`${path} is a directory`);
    const data = n.data;
    return (async function* () {
      for (let off = 0; off < data.byteLength; off += 64 * 1024) yield data.subarray(off, off + 64 * 1024);
    })();
  }
  async writeFile(p: Principal, id: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number } = {}): Promise<number> {
    const fs = this.fs(p, id);
    if (fs.get(this.parentOf(path))?.type !== 'dir') throw new NotFoundError('directory', this.parentOf(path));
    const chunks: Uint8Array[] = [];
    let total = 0;
    for await (const c of data) {
      await this.onWriteChunk?.(c);
      chunks.push(new Uint8Array(c));
      total += c.byteLength;
    }
    fs.set(path, { type: 'file', data: new Uint8Array(Buffer.concat(chunks)), mode: opts.mode ?? 0o644, mtimeMs: this.clock.now() });
    return total;
  }
  async listFiles(p: Principal, id: string, path: string): Promise<FileEntry[]> {
    const fs = this.fs(p, id);
    if (this.node(p, id, path).type !== 'dir') throw new InvalidArgumentError(`${path} is not a directory`);
    const prefix = path === '/' ? '/' : `${path}/`;
    return [...fs.entries()]
      .filter(([k]) => k !== path && k.startsWith(prefix) && !k.slice(prefix.length).includes('/'))
      .map(([k, n]) => ({ name: k.slice(prefix.length), type: n.type, size: n.data.byteLength, mode: n.mode, mtimeMs: n.mtimeMs }));
  }
  async statFile(p: Principal, id: string, path: string): Promise<FileStat> {
    const n = this.node(p, id, path);
    return { path, name: path.split('/').pop() || '/', type: n.type, size: n.data.byteLength, mode: n.mode, mtimeMs: n.mtimeMs };
  }
  async mkdir(p: Principal, id: string, path: string, opts: { parents?: boolean } = {}): Promise<void> {
    const fs = this.fs(p, id);
    const parts = path.split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const sub = `/${parts.slice(0, i).join('/')}`;
      if (fs.has(sub)) continue;
      if (i < parts.length && !opts.parents) throw new NotFoundError('directory', sub);
      fs.set(sub, { type: 'dir', data: new Uint8Array(), mode: 0o755, mtimeMs: this.clock.now() });
    }
  }
  async removeFile(p: Principal, id: string, path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    const fs = this.fs(p, id);
    this.node(p, id, path);
    const children = [...fs.keys()].filter((k) => k.startsWith(`${path}/`));
    if (children.length > 0 && !opts.recursive) throw new AppError('conflict', `${path} is not empty`);
    for (const k of [path, ...children]) fs.delete(k);
  }

  async pause(p: Principal, id: string): Promise<SessionInfo> {
    return this.move(this.rec(p, id), 'paused');
  }
  async resume(p: Principal, id: string): Promise<SessionInfo> {
    return this.move(this.rec(p, id), 'running');
  }
  async hibernate(p: Principal, id: string): Promise<SessionInfo> {
    const r = this.rec(p, id);
    this.move(r, 'hibernating');
    return this.move(r, 'hibernated');
  }
  async wake(p: Principal, id: string): Promise<SessionInfo> {
    const r = this.rec(p, id);
    this.move(r, 'waking');
    return this.move(r, 'running');
  }

  async snapshot(p: Principal, id: string, opts: { name?: string } = {}): Promise<SnapshotRecord> {
    const r = this.live(p, id);
    const s: SnapshotRecord = {
      id: newId('snapshot'),
      tenantId: r.tenantId,
      sessionId: id,
      kind: 'named',
      name: opts.name ?? null,
      backend: r.backend,
      settings: structuredClone(r.settings),
      sizeBytes: 4096,
      createdAt: this.clock.now(),
    };
    this.snapshots.set(s.id, s);
    return structuredClone(s);
  }
  async listSnapshots(p: Principal, filter: { sessionId?: string } = {}): Promise<SnapshotRecord[]> {
    return [...this.snapshots.values()].filter((s) => !filter.sessionId || s.sessionId === filter.sessionId).map((s) => structuredClone(s));
  }
  async getSnapshot(_p: Principal, snapshotId: string): Promise<SnapshotRecord> {
    const s = this.snapshots.get(snapshotId);
    if (!s) throw new NotFoundError('snapshot', snapshotId);
    return structuredClone(s);
  }
  async deleteSnapshot(p: Principal, snapshotId: string): Promise<void> {
    await this.getSnapshot(p, snapshotId);
    this.snapshots.delete(snapshotId);
  }
  async fork(p: Principal, snapshotId: string, count: number): Promise<Array<{ session: SessionInfo; agentToken: string }>> {
    const s = await this.getSnapshot(p, snapshotId);
    return Array.from({ length: count }, () => this.newSession(p, { tenantId: s.tenantId }, s));
  }

  auditQuery(_p: Principal, q: { sessionId?: string; afterSeq?: number; limit?: number }): AuditEntry[] {
    return this.audit
      .filter((e) => (!q.sessionId || e.sessionId === q.sessionId) && e.seq > (q.afterSeq ?? 0))
      .slice(0, q.limit ?? 100);
  }
  auditVerify(): VerifyResult {
    return verifyChain(this.audit);
  }

  health(): { ok: boolean; backends: Record<string, { available: boolean; reason?: string }> } {
    return { ok: this.healthy, backends: { gvisor: { available: this.healthy }, qemu: { available: false, reason: 'not installed' } } };
  }

  async close(): Promise<void> {
    for (const { handle } of this.execs.values()) await handle.kill();
  }
}
