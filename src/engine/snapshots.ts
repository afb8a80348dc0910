/**
 * Snapshots: named images of a live session, taken, listed, removed and forked into new sessions; and the
 * two steps engine/templates.ts builds on (capture a session into an image, start a session from one).
 */
import {
  assertVerb,
  InvalidArgumentError,
  InvalidStateError,
  UnavailableError,
  newId,
  throwIfAborted,
  type CallOptions,
  type Principal,
  type SessionRecord,
  type SnapshotRecord,
} from '../core/index.js';
import type { SessionInfo } from './api.js';
import { newAgentToken } from './auth.js';
import type { Hibernation } from './hibernation.js';
import type { SessionKernel } from './kernel.js';
import { mapLimit } from './lock.js';
import { LIMITS, resolveSettings } from './options.js';
import { newSessionRecord } from './records.js';
import { requireOperator, tenantFilter, visibleSnapshot } from './visibility.js';

export class Snapshots {
  constructor(
    private readonly k: SessionKernel,
    private readonly hib: Hibernation,
  ) {}

  async snapshot(p: Principal, id: string, opts: CallOptions & { name?: string } = {}): Promise<SnapshotRecord> {
    const k = this.k;
    requireOperator(p, id);
    if (opts.name !== undefined && !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/.test(opts.name)) {
      throw new InvalidArgumentError('name: 1-128 characters of letters, digits, ".", "_" or "-"', { details: { field: 'name' } });
    }
    let out!: SnapshotRecord;
    await k.lifecycle(p, id, 'session.snapshot', async (r) => {
      if (r.state === 'hibernated') await this.hib.wakeLocked(r, opts);
      assertVerb('snapshot', id, r.state, r.failureReason);
      const d = k.driver(r.backend);
      // The size is known only once taken: refuse when the quota is already used up, and drop a snapshot
      // that took the tenant past it.
      await k.checkQuota(r.tenantId, { snapshotBytes: 1 });
      const snapshotId = newId('snapshot');
      await k.idempotency.note(snapshotId);
      const dir = await k.o.snapshots.create(snapshotId);
      try {
        await d.checkpoint(r.sandboxId as string, dir, { ...opts, leaveRunning: true });
        if (r.state === 'paused') await d.pause(r.sandboxId as string);
        await k.checkQuota(r.tenantId, { snapshotBytes: await k.o.snapshots.sizeBytes(snapshotId) });
      } catch (e) {
        await k.o.snapshots.delete(snapshotId);
        throw e;
      }
      out = {
        id: snapshotId,
        tenantId: r.tenantId,
        sessionId: r.id,
        kind: 'named',
        name: opts.name ?? null,
        backend: r.backend,
        settings: r.settings,
        sizeBytes: await k.o.snapshots.sizeBytes(snapshotId),
        createdAt: k.o.clock.now(),
      };
      // With the gate configuration as it stands now: fork branches inherit it (ToolGate.inheritSnapshot).
      await k.o.store.transaction(async () => {
        await k.o.store.snapshots.insert(out);
        await k.gate.keepForSnapshot(r, snapshotId);
      });
    });
    return out;
  }

  async list(p: Principal, filter: { sessionId?: string } = {}): Promise<SnapshotRecord[]> {
    // Another tenant's session (or one that never existed), or another session's under an agent token, is
    // not found, as on every other route; then agents are refused.
    if (filter.sessionId) await this.k.record(p, filter.sessionId);
    requireOperator(p, filter.sessionId);
    return (await this.k.o.store.snapshots
      .list({ ...tenantFilter(p), ...(filter.sessionId ? { sessionId: filter.sessionId } : {}) })
      ).filter((s) => s.kind === 'named');
  }

  async get(p: Principal, snapshotId: string): Promise<SnapshotRecord> {
    const s = await visibleSnapshot(this.k.o.store, p, snapshotId);
    requireOperator(p);
    return s;
  }

  async delete(p: Principal, snapshotId: string): Promise<void> {
    const s = await visibleSnapshot(this.k.o.store, p, snapshotId);
    requireOperator(p);
    await this.k.removeSnapshot(s);
    await this.k.audit(p, s.tenantId, s.sessionId, 'snapshot.delete', 'ok', { snapshotId });
  }

  async fork(p: Principal, snapshotId: string, count: number, opts: CallOptions = {}): Promise<Array<{ session: SessionInfo; agentToken: string }>> {
    const k = this.k;
    if (p.kind === 'agent') await visibleSnapshot(k.o.store, p, snapshotId);
    requireOperator(p);
    if (!Number.isInteger(count) || count < LIMITS.forkCount.min || count > LIMITS.forkCount.max) {
      throw new InvalidArgumentError(`count: must be an integer between ${LIMITS.forkCount.min} and ${LIMITS.forkCount.max}`, { details: { field: 'count' } });
    }
    const snap = await visibleSnapshot(k.o.store, p, snapshotId);
    const d = k.driver(snap.backend);
    if (!d.capabilities.fork) throw new UnavailableError(`the ${snap.backend} backend cannot fork`);
    const dir = k.o.snapshots.dir(snap.id);
    const now = k.o.clock.now();
    const objective = (await k.o.store.sessions.get(snap.sessionId))?.objective ?? null;
    const branches: Array<{ r: SessionRecord; agentToken: string }> = [];
    await k.mutex.run(`tenant:${snap.tenantId}`, async () => {
      await k.checkQuota(snap.tenantId, { sessions: count, memoryMb: count * snap.settings.memoryMb });
      for (let i = 0; i < count; i++) {
        const id = newId('session');
        await k.idempotency.note(id);
        const agentToken = newAgentToken(id);
        const r = newSessionRecord({
          id, tenantId: snap.tenantId, backend: snap.backend, settings: snap.settings, objective,
          metadata: {}, agentToken, reason: 'fork', parentSnapshotId: snap.id, now,
        });
        await k.o.store.sessions.insert(r);
        branches.push({ r, agentToken });
      }
    });
    await k.audit(p, snap.tenantId, snap.sessionId, 'snapshot.fork', 'ok', { snapshotId, sessions: branches.map((b) => b.r.id) });
    await k.gate.inheritSnapshot(p, snap, branches.map((b) => b.r));
    const results = await mapLimit(branches, k.forkConcurrency, async ({ r }) => {
      throwIfAborted(opts.signal);
      await d.restore(k.spec(r, r.sandboxId as string, r.identity), dir, opts);
      await k.transition(r, 'running');
    });
    const failed = results.findIndex((x) => x.status === 'rejected');
    if (failed >= 0) {
      // All or nothing: a half-made fork would leave the caller with branches it did not ask for.
      for (const { r } of branches) {
        if (r.sandboxId) await d.destroy(r.sandboxId).catch(() => undefined);
        if (r.state === 'creating') await k.transition(r, 'failed', { failureReason: 'fork failed', sandboxId: null });
        await k.transition(r, 'terminated', { sandboxId: null });
      }
      throw (results[failed] as PromiseRejectedResult).reason;
    }
    return Promise.all(branches.map(async ({ r, agentToken }) => ({ session: await k.info(r), agentToken })));
  }

  /**
   * One new session restored from an image with a fresh identity, as a fork branch is (engine/templates.ts
   * starts sessions from templates with it). On failure the session ends failed and the error is thrown.
   */
  async startFrom(p: Principal, snap: SnapshotRecord, input: { objective: string | null; metadata: Record<string, string>; idleTimeoutS?: number }, opts: CallOptions): Promise<{ session: SessionInfo; agentToken: string }> {
    const k = this.k;
    const d = k.driver(snap.backend);
    if (!d.capabilities.fork) throw new UnavailableError(`the ${snap.backend} backend cannot start sessions from an image`);
    const settings = input.idleTimeoutS === undefined ? snap.settings : { ...snap.settings, idleTimeoutS: resolveSettings({ idleTimeoutS: input.idleTimeoutS, backend: snap.backend }, k.defaults).settings.idleTimeoutS };
    const id = newId('session');
    await k.idempotency.note(id);
    const agentToken = newAgentToken(id);
    const r = newSessionRecord({
      id, tenantId: snap.tenantId, backend: snap.backend, settings, objective: input.objective,
      metadata: input.metadata, agentToken, reason: 'fork', parentSnapshotId: snap.id, now: k.o.clock.now(),
    });
    await k.mutex.run(`tenant:${snap.tenantId}`, async () => {
      await k.checkQuota(snap.tenantId, { sessions: 1, memoryMb: settings.memoryMb });
      await k.o.store.sessions.insert(r);
    });
    await k.audit(p, snap.tenantId, id, 'session.create', 'ok', { backend: snap.backend, fromSnapshot: snap.id, ...(snap.kind === 'template' ? { template: snap.name } : {}), objective: r.objective });
    await k.bringUp(r, d, () => d.restore(k.spec(r, r.sandboxId as string, r.identity), k.o.snapshots.dir(snap.id), opts));
    return { session: await k.info(r), agentToken };
  }

  /** Checkpoints a running session into a new image recorded with `fields`; its machine stops (the session is ended next). */
  async capture(id: string, fields: Pick<SnapshotRecord, 'name' | 'template'>, opts: CallOptions): Promise<SnapshotRecord> {
    const k = this.k;
    return k.mutex.run(id, async () => {
      const r = await k.o.store.sessions.get(id);
      if (!r || r.state !== 'running' || !r.sandboxId) throw new InvalidStateError(`session ${id} is ${r?.state ?? 'gone'}; it cannot be captured`, { details: { state: r?.state } });
      const d = k.driver(r.backend);
      const snapshotId = newId('snapshot');
      await k.idempotency.note(snapshotId);
      const dir = await k.o.snapshots.create(snapshotId);
      try {
        await d.checkpoint(r.sandboxId, dir, opts);
        const rec: SnapshotRecord = {
          id: snapshotId, tenantId: r.tenantId, sessionId: r.id, kind: 'template', name: fields.name, backend: r.backend,
          settings: r.settings, sizeBytes: await k.o.snapshots.sizeBytes(snapshotId), createdAt: k.o.clock.now(),
          ...(fields.template ? { template: fields.template } : {}),
        };
        await k.o.store.snapshots.insert(rec);
        return rec;
      } catch (e) {
        await k.o.snapshots.delete(snapshotId);
        throw e;
      }
    });
  }
}
