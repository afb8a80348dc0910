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
