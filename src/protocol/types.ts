/**
 * Wire types shared by the server and the SDK. JSON only; times are ISO-8601 strings on the wire.
 * These names are a public contract (CLI --json output is built from them): add fields, never rename.
 */
import type { AuditKeyInfo, BackendName, ConsistencyDocument, FileEntry, FileStat, InclusionDocument, Principal, SessionState, SignedHead, TreeVerifyResult } from '../core/index.js';

export interface SessionSettingsView {
  memoryMb: number;
  /** Room for the session's writes, MiB (gvisor: inside memoryMb; qemu: the disk grown to it); null: the image's disk as built (qemu). */
  diskMb: number | null;
  cpus: number;
  idleTimeoutS: number;
  /** The names of the environment variables given at create. Their values are secrets: never shown back. */
  env: string[];
  /** The desktop's screen, pixels; null without a desktop. */
  desktop: { width: number; height: number } | null;
}

export interface MeteringView {
  cpuSeconds: number;
  peakMemoryBytes: number;
  execCount: number;
  bytesIn: number;
  bytesOut: number;
  /** Outbound connections the egress gate allowed, and refused. */
  egressConnections: number;
  egressRefused: number;
  /** Bytes the session sent out through egress, and received from it. */
  egressBytesOut: number;
  egressBytesIn: number;
  /** Seconds spent in each state so far, including the current one. */
  stateSeconds: Partial<Record<SessionState, number>>;
}

export interface SessionView {
  id: string;
  tenantId: string;
  state: SessionState;
  backend: BackendName;
  objective: string | null;
  settings: SessionSettingsView;
  metadata: Record<string, string>;
  failureReason: string | null;
  parentSnapshotId: string | null;
  hostname: string;
  createdAt: string;
  updatedAt: string;
  stateSince: string;
  lastActivityAt: string;
  metering: MeteringView;
}

/** Returned once, by session create and fork: the token is never shown again. */
export interface CreatedSessionView extends SessionView {
  agentToken: string;
}

export interface SessionListView {
  sessions: SessionView[];
  /** Pass as `after` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** DELETE /v1/sessions/:id. */
export interface TerminatedView {
  id: string;
  state: 'terminated';
}

export interface SnapshotView {
  snapshotId: string;
  id: string;
  tenantId: string;
  sessionId: string;
  name: string | null;
  kind: 'named' | 'hibernation' | 'template';
  backend: BackendName;
  sizeBytes: number;
  createdAt: string;
  /** Settings of the source session; fork branches inherit them. */
  settings: SessionSettingsView;
}

export interface SnapshotListView {
  snapshots: SnapshotView[];
}

export interface ForkView {
  sessions: CreatedSessionView[];
}

export interface CreateSessionBody {
  objective?: string;
  /** MiB, 64..16384; default 512. */
  memoryMb?: number;
  /**
   * Room for the session's writes, MiB; a writer past it gets ENOSPC. gVisor (files in its memory): 16..memoryMb,
   * default half of memoryMb. QEMU: the guest's disk is grown to it (at least the image's free room); default
   * the image's.
   */
  diskMb?: number;
  /** 0.1..(host cores); default 1. */
  cpus?: number;
  /** Seconds, 0 (never) .. 604800; default 0. */
  idleTimeoutS?: number;
  env?: Record<string, string>;
  backend?: BackendName;
  metadata?: Record<string, string>;
  /** Root only: the tenant to create the session in (default: the caller's tenant, or "default"). */
  tenantId?: string;
  /** Start from this template (its machine, processes running) instead of the base image; backend, memoryMb, diskMb, cpus and env then come from it. */
  template?: string;
  /** The session's egress allow-list (`host`, `*.domain`, `host:port`, IP, CIDR); default none: no egress. */
  egressAllow?: string[];
  /** Loopback, private, link-local and metadata ranges (CIDRs) the session may reach anyway; default none. */
  egressAllowCidr?: string[];
  /** A desktop (Xvfb, openbox, VNC; the `computer` tool): true for the default 1280x800 screen, or its size in pixels. Default none. */
  desktop?: boolean | { width?: number; height?: number };
}

export interface ExecBody {
  argv: string[];
  cwd?: string;
  env?: Record<string, string>;
  /** Milliseconds; 0 or absent = no limit. */
  timeoutMs?: number;
  /** When true, stdin is a pipe fed by POST …/execs/:execId/stdin. */
  stdin?: boolean;
  /**
   * When true the command runs on its own: the answer is `{execId, pid}` at once (JSON), its output is kept
   * inside the sandbox (GET …/processes/:execId/output). Cannot be combined with stdin.
   */
  background?: boolean;
}

/** One NDJSON line of an exec response stream. `data` is base64. */
export type ExecStreamLine =
  | { type: 'started'; execId: string; sessionId?: string }
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | { type: 'exit'; code: number; signal: number | null; timedOut: boolean }
  | { type: 'error'; error: WireError }
  /** Sent after EXEC_HEARTBEAT_MS without output, so idle-timeouts along the way never cut a quiet command. */
  | { type: 'ping' };

/** POST …/execs/:execId/stdin. */
export interface StdinView {
  /** Bytes written to the command's stdin by this request. */
  bytes: number;
  closed: boolean;
}

export interface KillBody {
  /** Signal number (1..64) or name ("SIGTERM", "TERM"); default SIGKILL. */
  signal?: number | string;
}
export interface KillView {
  execId: string;
  signal: number;
}

export interface ForkBody {
  /** 1..64; default 1. */
  count?: number;
}

export interface SnapshotBody {
  name?: string;
}

export interface MkdirBody {
  path: string;
  /** Create missing parents, like mkdir -p. Default false. */
  parents?: boolean;
}

export interface FileListView {
  path: string;
  entries: FileEntry[];
}

export type FileStatView = FileStat;

/** PUT /v1/sessions/:id/files. */
export interface FileWriteView {
  path: string;
  bytes: number;
}

export interface OkView {
  ok: true;
}

export interface CreateTenantBody {
  name: string;
}

export interface TenantView {
  id: string;
  name: string;
  createdAt: string;
}

/** Returned once, by tenant create: the API key is never shown again. */
export interface CreatedTenantView extends TenantView {
  apiKey: string;
}

export interface TenantListView {
  tenants: TenantView[];
}

export interface AuditEntryView {
  seq: number;
  ts: string;
  /** The same instant in milliseconds since the epoch (what the hash covers). */
  tsMs: number;
  tenantId: string | null;
  sessionId: string | null;
  principal: Principal;
  action: string;
  outcome: string;
  data: Record<string, unknown>;
  prevHash: string;
  hash: string;
}

export interface AuditListView {
  entries: AuditEntryView[];
}

/**
 * The chain check and the tree check together. `problem` names the first failure: a chain problem
 * ('edited', 'removed', 'reordered', 'broken_link'), else the tree's ('truncated', 'rewritten', 'unsigned',
 * 'signature'); `firstBadSeq` is null where no entry can be named (a head whose signature fails).
 */
export type AuditVerifyView = (
  | { ok: true; entries: number; headHash: string }
  | { ok: false; entries: number; firstBadSeq: number | null; problem: AuditProblem }
) & { tree?: TreeVerifyResult };

export type AuditProblem = 'edited' | 'removed' | 'reordered' | 'broken_link' | 'truncated' | 'rewritten' | 'unsigned' | 'signature' | 'rollback';

export type AuditKeyView = AuditKeyInfo;
export type SignedHeadView = SignedHead;
export type InclusionProofView = InclusionDocument;
export type ConsistencyProofView = ConsistencyDocument;

export interface HealthView {
  ok: boolean;
  backends: Record<string, { available: boolean; reason?: string }>;
  /** Present while the server is starting (backends not ready yet; /v1 answers 503 unavailable). */
  starting?: StartingView;
}

/** Startup progress: the phase (image, backends, recovery), a sentence, the latest step, seconds so far. */
export interface StartingView {
  phase: string;
  message: string;
  detail: string | null;
  elapsedS: number;
}

export interface WireError {
  code: string;
  message: string;
  details?: Record<string, unknown>;
  /** True when the same request may succeed if retried later. */
  retryable?: boolean;
}
export interface ErrorBody {
  error: WireError;
}
