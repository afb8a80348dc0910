import { emptyMetering, newMachineId, sha256Hex, type BackendName, type SessionRecord, type SessionSettings } from '../core/index.js';

/** One sandbox id per incarnation, so a lazily deleted old one never collides with its successor. */
export function sandboxIdFor(sessionId: string, generation: number): string {
  return `${sessionId}-g${generation}`;
}

export function hostnameFor(sessionId: string): string {
  return `berth-${sessionId.slice(4, 16)}`;
}

/** A new session record in state `creating`, with a fresh identity (new sessions and fork branches alike). */
export function newSessionRecord(a: {
  id: string;
  tenantId: string;
  backend: BackendName;
  settings: SessionSettings;
  objective: string | null;
  metadata: Record<string, string>;
  agentToken: string;
  reason: 'create' | 'fork';
  parentSnapshotId: string | null;
  now: number;
}): SessionRecord {
  return {
    id: a.id,
    tenantId: a.tenantId,
    backend: a.backend,
    state: 'creating',
    objective: a.objective,
    settings: a.settings,
    metadata: { ...a.metadata },
    sandboxId: sandboxIdFor(a.id, 1),
    identity: { hostname: hostnameFor(a.id), machineId: newMachineId(), generation: 1, reason: a.reason },
    hibernationSnapshotId: null,
    parentSnapshotId: a.parentSnapshotId,
    failureReason: null,
    agentTokenHash: sha256Hex(a.agentToken),
    createdAt: a.now,
    updatedAt: a.now,
    stateSince: a.now,
    lastActivityAt: a.now,
    metering: emptyMetering(),
  };
}
