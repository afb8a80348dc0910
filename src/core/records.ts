import type { BackendName, SandboxIdentity } from './sandbox.js';
import type { BreakerSettings, BreakerState, Plan, PlanState } from './gate.js';
import type { SessionState } from './state.js';
import type { DesktopSettings } from './desktop.js';

/** Times are milliseconds since the epoch throughout. */

export interface SessionSettings {
  /** MiB; default 512. */
  memoryMb: number;
  /** cores; default 1. */
  cpus: number;
  /** Seconds without a call before the session hibernates by itself; 0 = never. Default 0. */
  idleTimeoutS: number;
  /**
   * Room for the session's writes, MiB. gVisor (writes in its memory): default half of memoryMb, at most
   * memoryMb. QEMU: the free room its disk is grown to, at least the image's; absent, the image's as built.
   * Absent too in gVisor records from before the limit.
   */
  diskMb?: number;
  env: Record<string, string>;
  /** A desktop (issue 11): its screen. Absent: no desktop. */
  desktop?: DesktopSettings;
}

export interface Metering {
  cpuSeconds: number;
  peakMemoryBytes: number;
  execCount: number;
  /** Bytes sent into the session (stdin, file writes). */
  bytesIn: number;
  /** Bytes read out of the session (stdout, stderr, file reads). */
  bytesOut: number;
  /** Egress (proxy connections and http.request; absent in records older than egress: 0): connections allowed, refused, bytes sent out, bytes received. */
  egressConnections?: number;
  egressRefused?: number;
  egressBytesOut?: number;
  egressBytesIn?: number;
  /** Seconds spent in each state, closed intervals only (the current state's time is added on read). */
  stateSeconds: Partial<Record<SessionState, number>>;
}

export function emptyMetering(): Metering {
  return { cpuSeconds: 0, peakMemoryBytes: 0, execCount: 0, bytesIn: 0, bytesOut: 0, egressConnections: 0, egressRefused: 0, egressBytesOut: 0, egressBytesIn: 0, stateSeconds: {} };
}

export interface SessionRecord {
  id: string;
  tenantId: string;
  backend: BackendName;
  state: SessionState;
  objective: string | null;
  settings: SessionSettings;
  metadata: Record<string, string>;
  /** Current sandbox incarnation; null while hibernated or after termination. */
  sandboxId: string | null;
  identity: SandboxIdentity;
  /** While hibernated: the internal snapshot holding the machine. */
  hibernationSnapshotId: string | null;
  /** For fork branches: the snapshot they came from. */
  parentSnapshotId: string | null;
  failureReason: string | null;
  /** SHA-256 (hex) of the session's agent token. */
  agentTokenHash: string;
  createdAt: number;
  updatedAt: number;
  /** When the current state was entered. */
  stateSince: number;
  /** Last API activity; drives the idle timeout. */
  lastActivityAt: number;
  metering: Metering;
}

/** 'template': the image of a template (engine/templates.ts), kept while the template exists. */
export type SnapshotKind = 'named' | 'hibernation' | 'template';

export interface SnapshotRecord {
  id: string;
  tenantId: string;
  /** The session it was taken from (may since be terminated). */
  sessionId: string;
  kind: SnapshotKind;
  name: string | null;
  backend: BackendName;
  /** Settings of the source session; fork branches inherit them. */
  settings: SessionSettings;
  sizeBytes: number;
  createdAt: number;
  /** Only for kind 'template': what built it (the template's name is `name`). */
  template?: TemplateMeta;
}

// ---- templates (engine/templates.ts) ----

/** A template recipe, as accepted (the protocol's schema checks its shape, the engine its meaning). */
export interface TemplateRecipe {
  /** Another template of the same tenant to start from; default the base image. */
  from?: string;
  /** Shell commands, run in order with /bin/sh -c as gated shell.exec calls. */
  run: string[];
  /** Absolute path → UTF-8 content, written (gated fs.write) before the commands run. */
  files?: Record<string, string>;
  /** Environment of every step (and, without `from`, of the machine). */
  env?: Record<string, string>;
  /** Hosts the build session may connect to (see the egress allow-list). */
  egressAllow?: string[];
}

export interface TemplateMeta {
  recipe: TemplateRecipe;
  /** `<principal kind>:<principal id>` of who built it. */
  createdBy: string;
  /** The template's snapshot id of `recipe.from` at build time, if any. */
  fromSnapshotId: string | null;
}

export interface TenantRecord {
  id: string;
  name: string;
  /** SHA-256 (hex) of the tenant's API key. */
  apiKeyHash: string;
  createdAt: number;
  /** Limits set by root (issue 12 §3); a missing field takes the server's default. */
  quotas?: Partial<TenantQuotas>;
}

/** Per-tenant limits. GB here are GiB (2^30 bytes). */
export interface TenantQuotas {
  /** Sessions not terminated or failed (hibernated ones count). */
  maxSessions: number;
  /** MiB of memory of the sessions that hold a machine (creating, running, paused, hibernating, waking). */
  maxMemoryMb: number;
  /** GiB of snapshots on disk, named and hibernation images alike. */
  maxSnapshotGb: number;
  /** GiB sent and received through the egress proxy, over the tenant's sessions' lifetimes. */
  maxEgressGb: number;
}

// ---- the tool gate (plan, planState and breaker are typed in gate.ts; src/policy checks and advances them) ----

/** A tenant's Cedar policy. Tenants without one get the default policy. */
export interface TenantPolicyRecord {
  tenantId: string;
  text: string;
  /** 1, 2, 3 … per tenant: bumped on every accepted change. */
  version: number;
  updatedAt: number;
  /** `<principal kind>:<principal id>` of who set it. */
  updatedBy: string;
}

/** An operator-defined tool of one tenant, as accepted by policy's defineTool(). */
export interface ToolDefinitionRecord {
  tenantId: string;
  name: string;
  /** The definition as JSON (name, description, schemas, risk, executor …). */
  definition: Record<string, unknown>;
  createdAt: number;
  updatedAt: number;
  updatedBy: string;
}

export interface GateSettings {
  /** When the breaker trips; the same names as on the wire (`breaker.failures`, `breaker.perMinute`). */
  breaker: BreakerSettings;
  /**
   * The session's egress allow-list: hosts its proxy connections and http.request may reach (`host`,
   * `host:port`, `*.domain`, IP, CIDR; see policy/egress.ts). Default none. Stored under its first name.
   */
  httpAllow: string[];
  /** Restricted ranges (loopback, private …) the operator lets the session reach. Absent in rows stored before egress: none. */
  egressAllowCidr?: string[];
  /** Seconds a pending approval waits for a decision; 0 = forever. Default 3600. */
  approvalTtlS: number;
}

/** One row per session: which tools it has, its gate settings, plan and breaker. */
export interface SessionGateRecord {
  sessionId: string;
  tenantId: string;
  /** Installed tool names; null = the default (every built-in tool). */
  tools: string[] | null;
  settings: GateSettings;
  /** The plan while one is set (as policy's validatePlan accepted it). */
  plan: Plan | null;
  /** Its progress. */
  planState: PlanState | null;
  planSetAt: number | null;
  planSetBy: string | null;
  breaker: BreakerState;
  /** The breaker paused the session; a reset resumes it. */
  pausedByBreaker: boolean;
  /** Tool calls evaluated so far. */
  calls: number;
  updatedAt: number;
}

/** The part of a session's gate row that is configuration: what a snapshot keeps and a fork branch inherits. */
export type GateConfig = Pick<SessionGateRecord, 'tools' | 'settings' | 'plan' | 'planState' | 'planSetAt' | 'planSetBy'>;

/**
 * The gate configuration of a session as it stood when a named snapshot was taken. Fork branches of the
 * snapshot start from it (with a closed breaker, no calls and no approvals). Deleted with its snapshot.
 */
export interface SnapshotGateRecord extends GateConfig {
  snapshotId: string;
  tenantId: string;
  /** The session the snapshot was taken from. */
  sessionId: string;
  createdAt: number;
}

/** 'cancelled': still pending when its session was terminated; closed by the system, never runs. */
export const APPROVAL_STATUSES = ['pending', 'approved', 'denied', 'expired', 'used', 'cancelled'] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];

/** A parked tool call waiting for (or holding) an operator's decision. */
export interface ApprovalRecord {
  id: string;
  tenantId: string;
  sessionId: string;
  tool: string;
  /** The checked (canonical) arguments: exactly what runs if approved. */
  args: Record<string, unknown>;
  /** SHA-256 of the canonical {tool, args}. */
  argsDigest: string;
  /** The plan step the agent named, if any. */
  step: string | null;
  status: ApprovalStatus;
  /** The permit policies that asked for approval. */
  policyIds: string[];
  requestedBy: string;
  createdAt: number;
  /** null = never expires. */
  expiresAt: number | null;
  decidedBy: string | null;
  decidedAt: number | null;
  reason: string | null;
  /** When the approved call started running (status 'used'). */
  usedAt: number | null;
  /** What the call answered (the public CallResult), once it ran or was refused for good. */
  result: Record<string, unknown> | null;
  /** When that answer was handed to the agent's repeated call; afterwards the same call asks anew. */
  deliveredAt: number | null;
}

/**
 * A port link (issue 9 §3): a signed, expiring URL (`/p/<token>/…`) that reaches one port of one session
 * without a bearer token. Only the SHA-256 of the token is kept; the token itself is shown once, at create.
 * A link works while now < expiresAt, revokedAt is null and its session is not terminated.
 */
export interface PortLinkRecord {
  id: string;
  tenantId: string;
  sessionId: string;
  port: number;
  /** SHA-256 (hex) of the link's token. */
  tokenHash: string;
  label: string | null;
  /** ms since the epoch. */
  createdAt: number;
  expiresAt: number;
  /** Who created it (an operator or root): connections through the link are audited under this principal. */
  createdBy: { kind: 'root' | 'operator'; id: string; tenantId: string | null };
  revokedAt: number | null;
  revokedBy: { kind: string; id: string } | null;
}

/**
 * A watch-only link to one session's console view (issue 10): whoever opens it sees that session, read-only,
 * until it expires or is revoked. Only the SHA-256 of its token is kept.
 */
export interface WatchLinkRecord {
  id: string;
  tenantId: string;
  sessionId: string;
  /** SHA-256 (hex) of the token in the link. */
  tokenHash: string;
  label: string | null;
  /** Who made it (`operator:ten_…`, `root:root`). */
  createdBy: string;
  /** ms since the epoch. */
  createdAt: number;
  expiresAt: number;
  revokedAt: number | null;
}
