/**
 * Core records → wire views. Each view is built field by field, so a field added to a record is never
 * exposed by accident (agentTokenHash, sandboxId and apiKeyHash stay on the server).
 */
import type { AuditEntry, SessionRecord, SnapshotRecord, TenantRecord, SessionSettings, TreeVerifyResult, VerifyResult } from '../core/index.js';
import type {
  AuditEntryView,
  AuditVerifyView,
  CreatedSessionView,
  SessionSettingsView,
  SessionView,
  SnapshotView,
  TenantView,
} from './types.js';

export function iso(ms: number): string {
  return new Date(ms).toISOString();
}

export function settingsView(s: SessionSettings): SessionSettingsView {
  const desktop = s.desktop ? { width: s.desktop.width, height: s.desktop.height } : null;
  return { memoryMb: s.memoryMb, diskMb: s.diskMb ?? null, cpus: s.cpus, idleTimeoutS: s.idleTimeoutS, env: Object.keys(s.env).sort(), desktop };
}

/** Millisecond precision, in seconds. */
const seconds = (ms: number) => Math.round(ms) / 1000;

/** `now` (ms since the epoch) adds the time spent so far in the current state to stateSeconds. */
export function toSessionView(r: SessionRecord, now: number): SessionView {
  const stateSeconds = { ...r.metering.stateSeconds };
  const current = Math.max(0, now - r.stateSince);
  stateSeconds[r.state] = seconds((stateSeconds[r.state] ?? 0) * 1000 + current);
  return {
    id: r.id,
    tenantId: r.tenantId,
    state: r.state,
    backend: r.backend,
    objective: r.objective,
    settings: settingsView(r.settings),
    metadata: { ...r.metadata },
    failureReason: r.failureReason,
    parentSnapshotId: r.parentSnapshotId,
    hostname: r.identity.hostname,
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
    stateSince: iso(r.stateSince),
    lastActivityAt: iso(r.lastActivityAt),
    metering: {
      cpuSeconds: r.metering.cpuSeconds,
      peakMemoryBytes: r.metering.peakMemoryBytes,
      execCount: r.metering.execCount,
      bytesIn: r.metering.bytesIn,
      bytesOut: r.metering.bytesOut,
      egressConnections: r.metering.egressConnections ?? 0,
      egressRefused: r.metering.egressRefused ?? 0,
      egressBytesOut: r.metering.egressBytesOut ?? 0,
      egressBytesIn: r.metering.egressBytesIn ?? 0,
      stateSeconds,
    },
  };
}

export function toCreatedSessionView(r: SessionRecord, agentToken: string, now: number): CreatedSessionView {
  return { ...toSessionView(r, now), agentToken };
}

export function toSnapshotView(r: SnapshotRecord): SnapshotView {
  return {
    snapshotId: r.id,
    id: r.id,
    tenantId: r.tenantId,
    sessionId: r.sessionId,
    name: r.name,
    kind: r.kind,
    backend: r.backend,
    sizeBytes: r.sizeBytes,
    createdAt: iso(r.createdAt),
    settings: settingsView(r.settings),
  };
}

export function toTenantView(r: TenantRecord): TenantView {
  return { id: r.id, name: r.name, createdAt: iso(r.createdAt) };
}

export function toAuditEntryView(e: AuditEntry): AuditEntryView {
  return {
    seq: e.seq,
    ts: iso(e.ts),
    tsMs: e.ts,
    tenantId: e.tenantId,
    sessionId: e.sessionId,
    principal: { kind: e.principal.kind, id: e.principal.id, tenantId: e.principal.tenantId },
    action: e.action,
    outcome: e.outcome,
    data: e.data,
    prevHash: e.prevHash,
    hash: e.hash,
  };
}

export function toAuditVerifyView(v: VerifyResult, tree?: TreeVerifyResult): AuditVerifyView {
  const t = tree === undefined ? {} : { tree };
  if (!v.ok) return { ok: false, entries: v.entries, firstBadSeq: v.firstBadSeq, problem: v.problem, ...t };
  if (tree !== undefined && !tree.ok) {
    const bad = [...tree.checkpoints, tree.latestSigned].find((c) => c !== undefined && !c.ok);
    if (bad?.problem !== undefined) return { ok: false, entries: v.entries, firstBadSeq: bad.firstBadSeq ?? null, problem: bad.problem, ...t };
    return { ok: false, entries: v.entries, firstBadSeq: tree.storedTreeFirstBadSeq ?? null, problem: 'edited', ...t };
  }
  return { ok: true, entries: v.entries, headHash: v.headHash, ...t };
}
