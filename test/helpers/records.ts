/**
 * Records for store tests: one of each kind, with every field set (and awkward values where a store could
 * mangle them: an env key with a space, non-ASCII, quotes and a newline). Shared by the store conformance
 * suite and the SQLite store's own tests.
 */
import { newId, newMachineId } from '../../src/core/ids.js';
import { emptyMetering, type SessionRecord, type SnapshotRecord, type TenantRecord } from '../../src/core/records.js';

export function session(over: Partial<SessionRecord> = {}): SessionRecord {
  const id = newId('session');
  return {
    id,
    tenantId: 'ten_a',
    backend: 'gvisor',
    state: 'running',
    objective: 'fix the build',
    settings: { memoryMb: 512, cpus: 1, idleTimeoutS: 0, env: { PATH: '/usr/bin', 'WEIRD KEY': 'ü "quoted"\n' } },
    metadata: { ticket: 'BER-1' },
    sandboxId: `sbx-${id}`,
    identity: { hostname: 'h1', machineId: newMachineId(), generation: 3, reason: 'wake' },
    hibernationSnapshotId: null,
    parentSnapshotId: null,
    failureReason: null,
    agentTokenHash: 'a'.repeat(64),
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_500,
    stateSince: 1_700_000_000_400,
    lastActivityAt: 1_700_000_000_450,
    metering: { ...emptyMetering(), cpuSeconds: 1.25, stateSeconds: { creating: 0.5, running: 12.75 } },
    ...over,
  };
}

export function snapshot(over: Partial<SnapshotRecord> = {}): SnapshotRecord {
  return {
    id: newId('snapshot'),
    tenantId: 'ten_a',
    sessionId: 'ses_x',
    kind: 'named',
    name: 'before-migration',
    backend: 'qemu',
    settings: { memoryMb: 1024, cpus: 2, idleTimeoutS: 60, env: {} },
    sizeBytes: 123_456_789,
    createdAt: 1_700_000_000_000,
    ...over,
  };
}

export function tenant(over: Partial<TenantRecord> = {}): TenantRecord {
  return { id: newId('tenant'), name: 'acme', apiKeyHash: newMachineId() + newMachineId(), createdAt: 1_700_000_000_000, ...over };
}
