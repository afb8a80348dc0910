/**
 * Hibernation: a session's machine checkpointed to an image and stopped (no RAM or CPU held), woken again
 * on demand; the idle sweep that hibernates sessions by themselves; and recovery's half of it, finishing
 * or rolling back a hibernate or a wake the server stopped in.
 */
import { reviveVnc } from './desktop.js';
import {
  assertVerb,
  InvalidStateError,
  newId,
  type CallOptions,
  type Principal,
  type SandboxDriver,
  type SandboxIdentity,
  type SessionRecord,
  type SnapshotStore,
  type Store,
} from '../core/index.js';
import type { SessionInfo } from './api.js';
import { SYSTEM, type Actor, type RecordTools, type SessionKernel } from './kernel.js';
import { foldStats } from './metering.js';
import { sandboxIdFor } from './records.js';

export class Hibernation {
  /** Sessions with at least one exec streaming: not idle. */
  private readonly activeExecs = new Map<string, number>();

  constructor(private readonly k: SessionKernel) {}

  /** Counts a streaming command as activity until the returned release is called (once). */
  hold(id: string): () => void {
    this.activeExecs.set(id, (this.activeExecs.get(id) ?? 0) + 1);
    return () => {
      const left = (this.activeExecs.get(id) ?? 1) - 1;
      if (left > 0) this.activeExecs.set(id, left);
      else this.activeExecs.delete(id);
    };
  }

  async hibernate(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.k.lifecycle(p, id, 'session.hibernate', (r, by) => this.hibernateLocked(r, opts, by));
  }

  async hibernateLocked(r: SessionRecord, opts: CallOptions, by?: Actor): Promise<void> {
    const k = this.k;
    assertVerb('hibernate', r.id, r.state);
    const d = k.driver(r.backend);
    const sandboxId = r.sandboxId as string;
    const snapshotId = newId('snapshot');
    const dir = await k.o.snapshots.create(snapshotId);
    const stats = await d.stats(sandboxId).catch(() => undefined);
    await k.transition(r, 'hibernating', { hibernationSnapshotId: snapshotId });
    try {
      await d.checkpoint(sandboxId, dir, opts);
    } catch (e) {
      await k.o.snapshots.delete(snapshotId);
      const alive = await d.adopt(k.spec(r, sandboxId, r.identity)).catch(() => false);
      if (alive) await k.transition(r, 'running', { hibernationSnapshotId: null });
      else await k.transition(r, 'failed', { failureReason: `hibernate failed: ${(e as Error).message}`, sandboxId: null });
      throw e;
    }
    foldStats(r, stats);
    await k.o.store.snapshots.insert({
      id: snapshotId,
      tenantId: r.tenantId,
      sessionId: r.id,
      kind: 'hibernation',
      name: null,
      backend: r.backend,
      settings: r.settings,
      sizeBytes: await k.o.snapshots.sizeBytes(snapshotId),
      createdAt: k.o.clock.now(),
    });
    await k.transition(r, 'hibernated', { sandboxId: null }, by);
  }

  async wake(p: Principal, id: string, opts: CallOptions = {}): Promise<SessionInfo> {
    return this.k.lifecycle(p, id, 'session.wake', async (r, by) => {
      if (r.state === 'running') return; // a transparent wake raced with another: nothing to do
      await this.wakeLocked(r, opts, by);
    });
  }

  async wakeLocked(r: SessionRecord, opts: CallOptions, by?: Actor): Promise<void> {
    const k = this.k;
    assertVerb('wake', r.id, r.state);
    if (!r.hibernationSnapshotId) throw new InvalidStateError(`session ${r.id} is hibernated but has no image to wake from`, { details: { state: r.state } });
    // A hibernated session holds no memory; waking takes its memory back, within the tenant's quota.
    await k.checkQuota(r.tenantId, { memoryMb: r.settings.memoryMb });
    const d = k.driver(r.backend);
    const snap = r.hibernationSnapshotId;
    const sandboxId = sandboxIdFor(r.id, r.identity.generation + 1);
    const identity: SandboxIdentity = { ...r.identity, generation: r.identity.generation + 1, reason: 'wake' };
    await k.transition(r, 'waking', { sandboxId });
    try {
      await d.restore(k.spec(r, sandboxId, identity), k.o.snapshots.dir(snap), opts);
    } catch (e) {
      await d.destroy(sandboxId).catch(() => undefined);
      await k.transition(r, 'hibernated', { sandboxId: null });
      throw e;
    }
    if (r.settings.desktop) {
      const why = await reviveVnc(d, sandboxId, opts).catch((e: unknown) => (e as Error).message);
      if (why) k.o.log?.(`session ${r.id}: the desktop's VNC server after wake: ${why}`);
    }
    await k.transition(r, 'running', { identity, hibernationSnapshotId: null, lastActivityAt: k.o.clock.now() }, by);
    const rec = await k.o.store.snapshots.get(snap);
    if (rec) await k.removeSnapshot(rec);
  }

  /** Hibernates sessions idle past their idleTimeoutS. Called by a timer; tests call it with a fake clock. */
  async sweepIdle(): Promise<string[]> {
    const k = this.k;
    // The same timer expires pending approvals past their time (the gate also checks lazily on every read).
    try {
      await k.gate.sweepExpired();
      await k.gate.control.sweep(); // a lapsed lease ends now, and terminals hear of it
    } catch (e) {
      k.o.log?.(`approval expiry sweep failed: ${(e as Error).message}`);
    }
    const now = k.o.clock.now();
    const done: string[] = [];
    for (const r0 of await k.o.store.sessions.list({ states: ['running'] })) {
      const r = k.meter.peek(r0);
      if (r.settings.idleTimeoutS <= 0 || this.activeExecs.has(r.id)) continue;
      if (now - r.lastActivityAt < r.settings.idleTimeoutS * 1000) continue;
      try {
        await k.lifecycle(SYSTEM, r.id, 'session.idle_hibernate', async (cur) => {
          if (cur.state === 'running') await this.hibernateLocked(cur, {});
        });
        done.push(r.id);
      } catch (e) {
        k.o.log?.(`idle hibernate of ${r.id} failed: ${(e as Error).message}`);
      }
    }
    return done;
  }
}

/** What became of a session recovery settled: re-adopted live, back to hibernated, or failed. */
export type Settled = 'adopted' | 'hibernated' | 'failed';

/**
 * Recovery (engine/recovery.ts) of a session the server stopped while it was hibernating or waking: a
 * machine still alive is adopted; otherwise a completed image makes it hibernated, and a hibernate without
 * one fails it. `alive` is the driver's adopt() answer for its sandbox.
 */
export async function settleHibernation(
  r: SessionRecord,
  t: RecordTools & { driver: SandboxDriver },
  alive: boolean,
  deps: { store: Store; snapshots: SnapshotStore },
): Promise<Settled> {
  const d = t.driver;
  const sandboxId = r.sandboxId;
  if (r.state === 'hibernating') {
    const snap = r.hibernationSnapshotId;
    const complete = snap !== null && (await imageComplete(d, deps.snapshots, snap));
    if (alive) {
      // Rolled back. A QEMU machine stopped for its migration stays stopped until told to go on.
      if (sandboxId) await d.resume(sandboxId);
      await t.transition('running', { hibernationSnapshotId: null });
      if (snap) await deps.snapshots.delete(snap);
      return 'adopted';
    }
    if (complete && snap) {
      if (sandboxId) await d.destroy(sandboxId).catch(() => undefined);
      if (!(await deps.store.snapshots.get(snap))) {
        await deps.store.snapshots.insert({
          id: snap, tenantId: r.tenantId, sessionId: r.id, kind: 'hibernation', name: null, backend: r.backend,
          settings: r.settings, sizeBytes: await deps.snapshots.sizeBytes(snap), createdAt: Date.now(),
        });
      }
      await t.transition('hibernated', { sandboxId: null });
      return 'hibernated';
    }
    await t.transition('failed', { failureReason: 'the server stopped during hibernation and no image was completed', sandboxId: null });
    return 'failed';
  }
  if (r.state !== 'waking') throw new InvalidStateError(`session ${r.id} is ${r.state}, neither hibernating nor waking`, { details: { state: r.state } });
  if (alive) {
    // A QEMU machine restored but not yet told to go on (`cont`) waits for it.
    if (sandboxId) await d.resume(sandboxId);
    await t.transition('running', {});
    return 'adopted';
  }
  if (sandboxId) await d.destroy(sandboxId).catch(() => undefined);
  await t.transition('hibernated', { sandboxId: null });
  return 'hibernated';
}

/** Whether the driver finished writing the image (each driver knows its own manifest). */
async function imageComplete(d: SandboxDriver, snapshots: SnapshotStore, id: string): Promise<boolean> {
  let dir: string;
  try {
    dir = snapshots.dir(id);
  } catch {
    return false; // the server stopped before the image directory was even made
  }
  return d.imageComplete(dir);
}
