/**
 * The Berth client. Small async API over the HTTP server:
 *
 *   const berth = new Berth({ url, token });
 *   const s = await berth.sessions.create({ memoryMb: 1024 });
 *   const { stdout } = await s.run(['uname', '-a']);
 *   await s.files.write('/work/in.txt', 'hello');
 *
 * Every async method takes `signal?: AbortSignal`. Errors are AppErrors with the server's code;
 * network failures are AppError('unavailable').
 */
import { ConfigError } from '../core/errors.js';
import type {
  AuditEntryView,
  AuditListView,
  AuditVerifyView,
  AuditKeyView,
  ConsistencyProofView,
  InclusionProofView,
  SignedHeadView,
  CreateSessionBody,
  CreatedSessionView,
  CreatedTenantView,
  ForkView,
  HealthView,
  OkView,
  SessionListView,
  SessionView,
  SnapshotListView,
  SnapshotView,
  TenantListView,
  TenantView,
} from '../protocol/types.js';
import type { SessionState } from '../core/state.js';
import type { SetTenantQuotasBody, TenantDetailView } from '../protocol/quotas.js';
import { Transport, type Query, type ResolvedClientOptions } from './http.js';
import { Session, type CallOpts } from './session.js';
import { ApprovalsApi, GateApi, PlansApi, PolicyApi, ToolsApi } from './gate.js';
import { TemplatesApi } from './templates.js';
import { ConsoleApi, ControlApi } from './console.js';

export interface BerthOptions {
  /** Server base URL. Default 'http://127.0.0.1:7070' (Berth.fromEnv in berth/sdk/node: $BERTH_URL). */
  url?: string;
  /**
   * Bearer token: the root key, a tenant API key or a session's agent token. Default none, so every /v1
   * call fails with 'unauthenticated' (Berth.fromEnv: $BERTH_TOKEN, else $BERTH_DATA/root.key).
   */
  token?: string;
  /** The fetch to use. Default globalThis.fetch (undici, keep-alive). */
  fetch?: typeof globalThis.fetch;
  /**
   * Deadline for each short call, ms; 0 = none. Default 120000. Exec streams, file transfers and the
   * lifecycle verbs that move machines (create, hibernate, wake, snapshot, fork, terminate) are bounded
   * by their signal only.
   */
  timeoutMs?: number;
}

function resolveOptions(o: BerthOptions): ResolvedClientOptions {
  const url = o.url ?? DEFAULT_URL;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`url: not a valid URL: ${JSON.stringify(url)}`, { details: { field: 'url' } });
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ConfigError(`url: must be http or https, got ${parsed.protocol}`, { details: { field: 'url' } });
  }
  const timeoutMs = o.timeoutMs ?? 120_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 0) throw new ConfigError(`timeoutMs: must be an integer ≥ 0, got ${timeoutMs}`, { details: { field: 'timeoutMs' } });
  const f = o.fetch ?? globalThis.fetch;
  if (typeof f !== 'function') throw new ConfigError('fetch: no fetch implementation available', { details: { field: 'fetch' } });
  if (o.token !== undefined && (typeof o.token !== 'string' || /\s/.test(o.token) || o.token === '')) {
    throw new ConfigError('token: must be a non-empty string without whitespace', { details: { field: 'token' } });
  }
  return Object.freeze({ url: url.replace(/\/+$/, ''), token: o.token, fetch: f, timeoutMs });
}

export const DEFAULT_URL = 'http://127.0.0.1:7070';

export type CreateSessionOptions = CreateSessionBody & CallOpts;

export interface ListSessionsOptions {
  /** Only these states. Default: every state but terminated. */
  states?: SessionState[];
  /** Only sessions carrying every one of these metadata labels. */
  metadata?: Record<string, string>;
  /** Page size, 1..1000. Default: no limit. */
  limit?: number;
  /** The nextCursor of the previous page. */
  after?: string;
}

export interface SessionPage {
  sessions: Session[];
  /** Pass as `after` for the next page; null on the last. */
  nextCursor: string | null;
}

const enc = (s: string) => encodeURIComponent(s);

export class Berth {
  readonly options: ResolvedClientOptions;
  readonly sessions: SessionsApi;
  readonly snapshots: SnapshotsApi;
  readonly tenants: TenantsApi;
  readonly audit: AuditApi;
  /** The tool gate: tools and calls (agent tokens too), approvals, policy, plans, gate settings. */
  readonly tools: ToolsApi;
  readonly approvals: ApprovalsApi;
  readonly policy: PolicyApi;
  readonly plans: PlansApi;
  readonly gate: GateApi;
  /** Templates: build from a recipe, list, show, remove (start one with sessions.create({ template })). */
  readonly templates: TemplatesApi;
  /** Control leases: take a session over from its agent and hand it back (the console's "Take control"). */
  readonly control: ControlApi;
  /** Sign-in links, the console session, policy validation and the live event stream. */
  readonly console: ConsoleApi;
  private readonly t: Transport;

  constructor(opts: BerthOptions = {}) {
    this.options = resolveOptions(opts);
    this.t = new Transport(this.options);
    this.sessions = new SessionsApi(this.t);
    this.snapshots = new SnapshotsApi(this.t);
    this.tenants = new TenantsApi(this.t);
    this.audit = new AuditApi(this.t);
    this.tools = new ToolsApi(this.t);
    this.approvals = new ApprovalsApi(this.t);
    this.policy = new PolicyApi(this.t);
    this.plans = new PlansApi(this.t);
    this.gate = new GateApi(this.t);
    this.templates = new TemplatesApi(this.t);
    this.control = new ControlApi(this.t);
    this.console = new ConsoleApi(this.t);
  }

  /** GET /healthz (no token needed). */
  health(opts: CallOpts = {}): Promise<HealthView> {
    return this.t.json<HealthView>('GET', '/healthz', { root: true, acceptStatus: [503], signal: opts.signal });
  }
}

class SessionsApi {
  constructor(private readonly t: Transport) {}

  /**
   * Starts a machine; resolves when it is running. The returned handle carries the agent token. Sent with
   * an Idempotency-Key and retried once on a connection error, so a lost answer does not start two.
   */
  async create(opts: CreateSessionOptions = {}): Promise<Session> {
    const { signal, ...body } = opts;
    return new Session(this.t, await this.t.json<CreatedSessionView>('POST', '/sessions', { json: body, signal, deadline: false, idempotent: true }));
  }
  async get(id: string, opts: CallOpts = {}): Promise<Session> {
    return new Session(this.t, await this.t.json<SessionView>('GET', `/sessions/${enc(id)}`, { signal: opts.signal }));
  }
  /** Every session not terminated (filtered by state and metadata labels), oldest first. */
  async list(opts: CallOpts & Omit<ListSessionsOptions, 'limit' | 'after'> = {}): Promise<Session[]> {
    return (await this.page(opts)).sessions;
  }
  /** One page: at most `limit` sessions after the cursor `after` (a previous page's nextCursor). */
  async page(opts: CallOpts & ListSessionsOptions = {}): Promise<SessionPage> {
    const state = opts.states?.length ? opts.states.join(',') : undefined;
    const query: Query = { state, limit: opts.limit, after: opts.after };
    const metadata = Object.entries(opts.metadata ?? {}).map(([k, v]) => `${k}=${v}`);
    const r = await this.t.json<SessionListView>('GET', '/sessions', { query, multi: { metadata }, signal: opts.signal });
    return { sessions: r.sessions.map((v) => new Session(this.t, v)), nextCursor: r.nextCursor ?? null };
  }
}

class SnapshotsApi {
  constructor(private readonly t: Transport) {}

  get(id: string, opts: CallOpts = {}): Promise<SnapshotView> {
    return this.t.json<SnapshotView>('GET', `/snapshots/${enc(id)}`, { signal: opts.signal });
  }
  async list(opts: CallOpts & { sessionId?: string } = {}): Promise<SnapshotView[]> {
    return (await this.t.json<SnapshotListView>('GET', '/snapshots', { query: { sessionId: opts.sessionId }, signal: opts.signal })).snapshots;
  }
  async delete(id: string, opts: CallOpts = {}): Promise<void> {
    await this.t.json<OkView>('DELETE', `/snapshots/${enc(id)}`, { signal: opts.signal, deadline: false });
  }
  /** Starts `count` (1..64, default 1) independent branches of a snapshot; each handle has its agent token. Idempotent as create is. */
  async fork(id: string, opts: CallOpts & { count?: number } = {}): Promise<Session[]> {
    const body = opts.count === undefined ? {} : { count: opts.count };
    const r = await this.t.json<ForkView>('POST', `/snapshots/${enc(id)}/fork`, { json: body, signal: opts.signal, deadline: false, idempotent: true });
    return r.sessions.map((v) => new Session(this.t, v));
  }
}

class TenantsApi {
  constructor(private readonly t: Transport) {}

  /** Root only. The API key in the result is shown once. */
  create(name: string, opts: CallOpts = {}): Promise<CreatedTenantView> {
    return this.t.json<CreatedTenantView>('POST', '/tenants', { json: { name }, signal: opts.signal });
  }
  async list(opts: CallOpts = {}): Promise<TenantView[]> {
    return (await this.t.json<TenantListView>('GET', '/tenants', { signal: opts.signal })).tenants;
  }
  /** A tenant with its quotas in force and what it uses (root: any tenant; an operator key: its own). */
  get(id: string, opts: CallOpts = {}): Promise<TenantDetailView> {
    return this.t.json<TenantDetailView>('GET', `/tenants/${encodeURIComponent(id)}`, { signal: opts.signal });
  }
  /** Root only: sets the given quotas (GB are GiB); the others keep their value. */
  setQuotas(id: string, quotas: SetTenantQuotasBody, opts: CallOpts = {}): Promise<TenantDetailView> {
    return this.t.json<TenantDetailView>('PUT', `/tenants/${encodeURIComponent(id)}/quotas`, { json: quotas, signal: opts.signal });
  }
}

class AuditApi {
  constructor(private readonly t: Transport) {}

  async query(opts: CallOpts & { sessionId?: string; afterSeq?: number; limit?: number } = {}): Promise<AuditEntryView[]> {
    const { signal, ...q } = opts;
    return (await this.t.json<AuditListView>('GET', '/audit', { query: q, signal })).entries;
  }
  /** Checks the chain and the tree; with `checkpoints` (published signed heads), each one's signature and consistency. */
  verify(opts: CallOpts & { checkpoints?: SignedHeadView[] } = {}): Promise<AuditVerifyView> {
    if (opts.checkpoints === undefined) return this.t.json<AuditVerifyView>('GET', '/audit/verify', { signal: opts.signal });
    return this.t.json<AuditVerifyView>('POST', '/audit/verify', { json: { checkpoints: opts.checkpoints }, signal: opts.signal });
  }
  /** The Ed25519 public key that signs tree heads. */
  key(opts: CallOpts = {}): Promise<AuditKeyView> {
    return this.t.json<AuditKeyView>('GET', '/audit/key', { signal: opts.signal });
  }
  /** A tree head over the whole log, signed now. */
  checkpoint(opts: CallOpts = {}): Promise<SignedHeadView> {
    return this.t.json<SignedHeadView>('POST', '/audit/checkpoints', { signal: opts.signal });
  }
  /** An inclusion proof for entry `seq` (against a head for `treeSize`, default the whole tree). */
  prove(seq: number, opts: CallOpts & { treeSize?: number } = {}): Promise<InclusionProofView> {
    const query = opts.treeSize === undefined ? {} : { treeSize: opts.treeSize };
    return this.t.json<InclusionProofView>('GET', `/audit/proofs/inclusion/${seq}`, { query, signal: opts.signal });
  }
  /** A consistency proof from the tree of `fromSize` entries to the tree of `toSize` (default: now). */
  consistency(fromSize: number, opts: CallOpts & { toSize?: number } = {}): Promise<ConsistencyProofView> {
    const query = opts.toSize === undefined ? { from: fromSize } : { from: fromSize, to: opts.toSize };
    return this.t.json<ConsistencyProofView>('GET', '/audit/proofs/consistency', { query, signal: opts.signal });
  }
}

export type { SessionsApi, SnapshotsApi, TenantsApi, AuditApi };
