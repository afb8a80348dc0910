/**
 * What the engine offers its callers (HTTP server, MCP adapter). The server turns a request into one of
 * these calls; it never sees drivers or the store.
 */
import type {
  BackendName,
  CallOptions,
  ExecHandle,
  ExecRequest,
  FileEntry,
  FileStat,
  Principal,
  SessionRecord,
  SnapshotRecord,
  TenantRecord,
  VerifyResult,
  AuditEntry,
  ApprovalRecord,
  ApprovalStatus,
  GateSettings,
  Plan,
  PlanState,
} from '../core/index.js';

import type { AuditProofs } from './audit-proofs.js';
import type { RequestAudit } from './request-audit.js';
import type { Idempotency } from './idempotency.js';
import type { TenantQuotas } from '../core/index.js';
import type { TenantUsage } from './quotas.js';

/** A tenant as `berth tenant show` reports it: its record, the limits in force and what it uses. */
export interface TenantInfo {
  tenant: TenantRecord;
  quotas: TenantQuotas;
  usage: TenantUsage;
}

export interface CreateSessionInput {
  objective?: string;
  memoryMb?: number;
  /** Room for the session's writes, MiB (gVisor: inside memoryMb; QEMU: the disk grown to it); see SessionSettings.diskMb. */
  diskMb?: number;
  cpus?: number;
  idleTimeoutS?: number;
  env?: Record<string, string>;
  backend?: BackendName;
  metadata?: Record<string, string>;
  tenantId?: string;
  /** Start from this template of the tenant (engine/templates.ts) instead of the base image. */
  template?: string;
  /** The session's egress allow-list and range allowances (policy/egress.ts); default none. */
  egressAllow?: string[];
  egressAllowCidr?: string[];
  /** A desktop (core/desktop.ts): true for DEFAULT_SCREEN, or its size. Default none. */
  desktop?: boolean | { width?: number; height?: number };
}

export interface SessionListFilter {
  states?: string[];
}

/** A session as the engine reports it: the record plus live figures folded into metering. */
export type SessionInfo = SessionRecord;

export interface Engine {
  /** Resolves a bearer token to a principal; throws AppError('unauthenticated'). */
  authenticate(token: string): Promise<Principal>;

  createTenant(p: Principal, name: string): Promise<{ tenant: TenantRecord; apiKey: string }>;
  listTenants(p: Principal): Promise<TenantRecord[]>;
  /** A tenant with its quotas in force and its use (root: any; an operator: its own). */
  getTenant(p: Principal, tenantId: string): Promise<TenantInfo>;
  /** Root only: sets some of a tenant's quotas. */
  setTenantQuotas(p: Principal, tenantId: string, input: Partial<Record<keyof TenantQuotas, unknown>>): Promise<TenantInfo>;
  /** The egress proxy's hook: throws 429 quota_exceeded once the session's tenant used its maxEgressGb. */
  checkEgressQuota(sessionId: string): Promise<void>;

  createSession(p: Principal, input: CreateSessionInput, opts?: CallOptions): Promise<{ session: SessionInfo; agentToken: string }>;
  listSessions(p: Principal, filter?: SessionListFilter): Promise<SessionInfo[]>;
  getSession(p: Principal, id: string): Promise<SessionInfo>;
  terminateSession(p: Principal, id: string, opts?: CallOptions): Promise<void>;

  /** Starts a command; exec ids let stdin and kill find it later. */
  exec(p: Principal, id: string, req: ExecRequest, opts?: CallOptions): Promise<{ execId: string; handle: ExecHandle }>;
  /** The running exec by id, for stdin and kill routes. */
  getExec(p: Principal, sessionId: string, execId: string): Promise<ExecHandle>;

  readFile(p: Principal, id: string, path: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>>;
  /** Creates missing parent directories first unless parents is false. */
  writeFile(p: Principal, id: string, path: string, data: AsyncIterable<Uint8Array>, opts?: CallOptions & { mode?: number; parents?: boolean }): Promise<number>;
  listFiles(p: Principal, id: string, path: string, opts?: CallOptions): Promise<FileEntry[]>;
  statFile(p: Principal, id: string, path: string, opts?: CallOptions): Promise<FileStat>;
  mkdir(p: Principal, id: string, path: string, opts?: CallOptions & { parents?: boolean }): Promise<void>;
  removeFile(p: Principal, id: string, path: string, opts?: CallOptions & { recursive?: boolean }): Promise<void>;

  pause(p: Principal, id: string, opts?: CallOptions): Promise<SessionInfo>;
  resume(p: Principal, id: string, opts?: CallOptions): Promise<SessionInfo>;
  hibernate(p: Principal, id: string, opts?: CallOptions): Promise<SessionInfo>;
  wake(p: Principal, id: string, opts?: CallOptions): Promise<SessionInfo>;

  snapshot(p: Principal, id: string, opts?: CallOptions & { name?: string }): Promise<SnapshotRecord>;
  listSnapshots(p: Principal, filter?: { sessionId?: string }): Promise<SnapshotRecord[]>;
  getSnapshot(p: Principal, snapshotId: string): Promise<SnapshotRecord>;
  deleteSnapshot(p: Principal, snapshotId: string, opts?: CallOptions): Promise<void>;
  fork(p: Principal, snapshotId: string, count: number, opts?: CallOptions): Promise<Array<{ session: SessionInfo; agentToken: string }>>;

  auditQuery(p: Principal, q: { sessionId?: string; afterSeq?: number; limit?: number }): Promise<AuditEntry[]>;
  auditVerify(p: Principal): Promise<VerifyResult>;
  /** An entry for something done through the web console (sign-in, sign-out, idle logoff, each state-changing request), in p's tenant. */
  recordConsoleAction(p: Principal, e: { action: string; outcome: string; data: Record<string, unknown> }): Promise<void>;
  /** Signed checkpoints and proofs (engine/audit-proofs.ts); undefined when the server has no audit key. */
  readonly auditProofs: AuditProofs | undefined;

  /** Liveness for /healthz: which backends are usable. */
  health(): { ok: boolean; backends: Record<string, { available: boolean; reason?: string }> };

  close(): Promise<void>;

  /** The tool gate: every agent tool call and the gate's operator surface. Every engine has one. */
  readonly gate: GateService;
  /** Background processes (engine/processes.ts): operator calls; kept inside each sandbox. */
  readonly processes: ProcessService;
  /** Terminals (engine/terminals.ts): operator calls; PTYs kept inside each sandbox. */
  readonly terminals: TerminalService;
  /** Watch-only links to one session's console view (engine/watch-links.ts). */
  readonly watchLinks: WatchLinkService;
  /** File verbs beyond one file: move, tar push/pull, watch (engine/files.ts). */
  readonly files: FileService;
  /** Every request with its principal (engine/request-audit.ts): the server's one middleware calls it. */
  readonly requests: RequestAudit;
  /** Templates: build from a recipe, list, show, remove (engine/templates.ts). */
  readonly templates: TemplateService;
  /** Idempotency-Key records (engine/idempotency.ts): the server's idempotency middleware calls it. */
  readonly idempotency: Idempotency;
  /** TCP connections to servers listening inside a session (engine/ports.ts). */
  readonly ports: PortService;
  /** Signed, expiring links to a port, for browsers (engine/port-links.ts). */
  readonly portLinks: PortLinkService;
  /** The desktop's VNC server for the console's live view: connections, tickets (engine/vnc.ts). */
  readonly vnc: VncService;
  /** A desktop's screen and its recording, kept inside the machine (engine/desktop-recording.ts). */
  readonly desktop: DesktopService;
}

// ---- the gate (issue: "no agent tool call runs until it is authorized") ------------------------------

import type { ProcessService } from './processes.js';
import type { TerminalService } from './terminals.js';
import type { WatchLinkService } from './watch-links.js';
export type { WatchLinkService } from './watch-links.js';
import type { FileService } from './files.js';
import type { TemplateService } from './templates.js';
import type { PortService } from './ports.js';
import type { PortLinkService } from './port-links.js';
import type { VncService } from './vnc.js';
export type { VncConnection, VncService } from './vnc.js';
import type { DesktopService } from './desktop-recording.js';
export type { DesktopInfo, DesktopService, RecordingStatus } from './desktop-recording.js';
export type { PortLinkService, PortLinkView, PortLinkState } from './port-links.js';
export type { FileService } from './files.js';
export type { BuildEvent, BuildTemplateInput, TemplateService } from './templates.js';
export type { ProcessOutputRequest, ProcessService } from './processes.js';
export type { TerminalClient, TerminalControl, TerminalOpenRequest, TerminalService, TerminalSink, TerminalView } from './terminals.js';

import type { CallResult, ToolView } from '../core/index.js';
export type { CallResult, GateStage, ToolView } from '../core/index.js';

export interface ToolCall {
  tool: string;
  args: unknown;
  /** Optional plan step id the agent claims this call is. */
  step?: string;
}

/** What the MCP adapter and the tool routes need from the engine (implemented by engine/gate). */
export interface ToolGateApi {
  listTools(p: Principal, sessionId: string): Promise<ToolView[]>;
  callTool(p: Principal, sessionId: string, call: ToolCall, opts?: CallOptions): Promise<CallResult>;
}

// ---- the gate's operator surface (implemented by engine/gate.ts; reached as engine.gate) -----------------

/** A tenant's policy as the gate holds it. */
export interface TenantPolicyInfo {
  tenantId: string;
  text: string;
  /** 0 for the default policy (never set), then 1, 2, 3 … */
  version: number;
  isDefault: boolean;
  updatedAt: number | null;
  updatedBy: string | null;
  /** SHA-256 of (Cedar schema, text): equal digests decide alike. */
  digest: string;
  /** Validator warnings (the policy was accepted). */
  warnings: string[];
}

/** A tool definition of a tenant (built-in or operator-defined), as JSON. */
export interface ToolDefinitionInfo {
  definition: Record<string, unknown>;
  builtin: boolean;
  updatedAt: number | null;
  updatedBy: string | null;
}

export interface GateInfo {
  sessionId: string;
  tenantId: string;
  /** Installed tool names (the default is every built-in). */
  tools: string[];
  settings: GateSettings;
  breaker: { open: boolean; trip: string | null; reason: string | null; openedAt: number | null; streakFailures: number };
  pausedByBreaker: boolean;
  /** Tool calls evaluated so far. */
  calls: number;
}

export interface GateSettingsInput {
  breaker?: { failures?: number; perMinute?: number };
  /** The session's egress allow-list (replaces it). `httpAllow` is its older name; give one, not both. */
  egressAllow?: string[];
  httpAllow?: string[];
  /** Restricted ranges the session may reach (replaces them). */
  egressAllowCidr?: string[];
  approvalTtlS?: number;
}

export interface PlanInfo {
  sessionId: string;
  plan: Plan | null;
  state: PlanState | null;
  setAt: number | null;
  setBy: string | null;
}

/** Options of tenant-scoped operator calls: root names the tenant (default: the default tenant). */
export interface TenantScope {
  tenantId?: string;
}

export interface GateService extends ToolGateApi {
  /** Agent tokens may read their own session's approvals. */
  getApproval(p: Principal, sessionId: string, approvalId: string): Promise<ApprovalRecord>;
  listApprovals(p: Principal, filter?: { statuses?: ApprovalStatus[]; sessionId?: string }): Promise<ApprovalRecord[]>;
  /** Records the decision, then runs the approved call at once (waking the session) and stores its result. */
  approve(p: Principal, approvalId: string): Promise<ApprovalRecord>;
  deny(p: Principal, approvalId: string, reason: string): Promise<ApprovalRecord>;
  /** The screen (PNG) kept when a desktop action was parked, its point marked; not_found when none was kept. */
  approvalScreenshot(p: Principal, approvalId: string): Promise<Buffer>;

  getPolicy(p: Principal, scope?: TenantScope): Promise<TenantPolicyInfo>;
  /** Validates against the tenant's tool set; on failure throws invalid_argument and keeps the old policy. */
  setPolicy(p: Principal, text: string, scope?: TenantScope): Promise<TenantPolicyInfo>;
  defineTool(p: Principal, definition: unknown, scope?: TenantScope): Promise<ToolDefinitionInfo>;
  listToolDefinitions(p: Principal, scope?: TenantScope): Promise<ToolDefinitionInfo[]>;

  getGate(p: Principal, sessionId: string): Promise<GateInfo>;
  setGate(p: Principal, sessionId: string, input: GateSettingsInput): Promise<GateInfo>;
  installTools(p: Principal, sessionId: string, tools: string[]): Promise<GateInfo>;
  resetBreaker(p: Principal, sessionId: string): Promise<GateInfo>;

  getPlan(p: Principal, sessionId: string): Promise<PlanInfo>;
  setPlan(p: Principal, sessionId: string, plan: unknown): Promise<PlanInfo>;
  clearPlan(p: Principal, sessionId: string): Promise<PlanInfo>;

  // ---- control leases (engine/gate-control.ts): a person takes a session over from its agent ----
  getControl(p: Principal, sessionId: string): Promise<ControlInfo>;
  /** `via` tells holders apart who share one principal (a console session). Renews the caller's own lease. */
  takeControl(p: Principal, sessionId: string, via?: string | null): Promise<ControlInfo>;
  releaseControl(p: Principal, sessionId: string, via?: string | null, force?: boolean): Promise<ControlInfo>;
  /** Checks a Cedar policy as setPolicy would, without saving it: errors and warnings, never a throw for bad text. */
  validatePolicy(p: Principal, text: string, scope?: TenantScope): Promise<PolicyValidation>;
}

import type { ControlInfo } from './gate-control.js';
export type { ControlInfo } from './gate-control.js';

export interface PolicyValidation {
  ok: boolean;
  errors: string[];
  warnings: string[];
}
