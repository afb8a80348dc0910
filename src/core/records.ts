import type { BackendName, SandboxIdentity } from './sandbox.js';
import type { SessionState } from './state.js';

/** Times are milliseconds since the epoch throughout. */

export interface SessionSettings {
  /** MiB; default 512. */
  memoryMb: number;
  /** cores; default 1. */
  cpus: number;
  /** Seconds without a call before the session hibernates by itself; 0 = never. Default 0. */
  idleTimeoutS: number;
  env: Record<string, string>;
}

export interface Metering {
  cpuSeconds: number;
  peakMemoryBytes: number;
  execCount: number;
  /** Bytes sent into the session (stdin, file writes). */
  bytesIn: number;
  /** Bytes read out of the session (stdout, stderr, file reads). */
  bytesOut: number;
  /** Seconds spent in each state, closed intervals only (the current state's time is added on read). */
  stateSeconds: Partial<Record<SessionState, number>>;
}

export function emptyMetering(): Metering {
  return { cpuSeconds: 0, peakMemoryBytes: 0, execCount: 0, bytesIn: 0, bytesOut: 0, stateSeconds: {} };
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

export type SnapshotKind = 'named' | 'hibernation';

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
}

export interface TenantRecord {
  id: string;
  name: string;
  /** SHA-256 (hex) of the tenant's API key. */
  apiKeyHash: string;
  createdAt: number;
}

// ---- the tool gate (engine/gate.ts owns the shapes of plan, planState and breaker; src/policy checks them) ----

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
  /** Identical failing calls in a row that trip the breaker. Default 10. */
  breakerFailures: number;
  /** Calls in any 60 s window beyond which the breaker trips. Default 120. */
  breakerPerMinute: number;
  /** Hosts http.request may reach (`host`, `host:port` or `*.domain`). Default none. */
  httpAllow: string[];
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
  /** The plan ({objective, steps}) while one is set. */
  plan: Record<string, unknown> | null;
  /** Its progress ({cursor, consumed}). */
  planState: Record<string, unknown> | null;
  planSetAt: number | null;
  planSetBy: string | null;
  /** The breaker state (policy's BreakerState). */
  breaker: Record<string, unknown>;
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
