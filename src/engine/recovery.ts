import { setTimeout as sleep } from 'node:timers/promises';
import { LIVE_STATES, UNSETTLED_STATES, type BackendName, type SandboxDriver, type SnapshotStore, type Store } from '../core/index.js';
import type { SessionManager } from './manager.js';
import { settleHibernation } from './hibernation.js';
import { mapLimit } from './lock.js';

/** Sessions recovered at once (each is mostly waiting: a FIFO handshake, a cgroup write). */
const RECOVERY_CONCURRENCY = 8;
/** Tries per session before it is marked failed, and the pause between them, ms. */
const RECOVERY_ATTEMPTS = 2;
const RETRY_PAUSE_MS = 500;

export interface RecoveryReport {
  adopted: string[];
  failed: string[];
  orphansRemoved: string[];
  snapshotDirsRemoved: string[];
  /** Wall time of the whole recovery, ms (the restart-time figure of `npm run crashloop` includes it). */
  elapsedMs: number;
}

/**
 * Brings records and machines back into agreement after the server stopped, however it stopped
 * (SIGKILL included): live sessions are re-adopted, interrupted transitions are finished or rolled back,
 * and sandboxes or images no record owns are removed.
 */
export async function recover(deps: {
  manager: SessionManager;
  store: Store;
  snapshots: SnapshotStore;
  drivers: Partial<Record<BackendName, SandboxDriver>>;
  log?: (l: string) => void;
}): Promise<RecoveryReport> {
  const { manager, store } = deps;
  const t0 = Date.now();
  const report: RecoveryReport = { adopted: [], failed: [], orphansRemoved: [], snapshotDirsRemoved: [], elapsedMs: 0 };
  const open = await store.sessions.list({ states: UNSETTLED_STATES });
  // Bounded parallel: a restart with dozens of sessions waits for the slowest few, not the sum of all.
  await mapLimit(open, RECOVERY_CONCURRENCY, (rec) => settle(rec.id, () => manager.withRecord(rec.id, async (r, t) => {
      const d = t.driver;
      if (!d) {
        await t.transition('failed', { failureReason: `backend ${r.backend} is not available after restart`, sandboxId: null });
        report.failed.push(r.id);
        return;
      }
      const sandboxId = r.sandboxId;
      // An adopt that throws (the backend could not tell) is not "gone": settle() retries the session and only
      // then fails it; taking it as false would destroy a sandbox that may well be running.
      const alive = sandboxId && r.state !== 'creating' ? await d.adopt(t.spec(sandboxId)) : false;
      switch (r.state) {
        case 'creating':
          if (sandboxId) await d.destroy(sandboxId).catch(() => undefined);
          await t.transition('failed', { failureReason: 'the server stopped while the session was being created', sandboxId: null });
          report.failed.push(r.id);
          return;
        case 'running':
        case 'paused':
          if (alive && sandboxId) {
            // The record is the truth about pause: a freeze or thaw interrupted by the crash is redone.
            if (r.state === 'paused') await d.pause(sandboxId);
            else {
              await d.resume(sandboxId);
              await t.listenEgress(); // a paused one listens again when it is resumed
            }
            report.adopted.push(r.id);
          } else {
            if (sandboxId) await d.destroy(sandboxId).catch(() => undefined);
            await t.transition('failed', { failureReason: 'the sandbox was lost while the server was down', sandboxId: null });
            report.failed.push(r.id);
          }
          return;
        case 'hibernating':
        case 'waking': {
          // Finished or rolled back by hibernation's own rules (engine/hibernation.ts).
          const settled = await settleHibernation(r, { ...t, driver: d }, !!alive, deps);
          if (settled === 'adopted') report.adopted.push(r.id);
          else if (settled === 'failed') report.failed.push(r.id);
          return;
        }
        default:
          return;
      }
    })));

  /**
   * One session's recovery, retried once; if it still throws, the session is failed with the reason and
   * recovery goes on: one stuck sandbox must never keep the server from starting.
   */
  async function settle(id: string, step: () => Promise<void>): Promise<void> {
    let error: unknown;
    for (let attempt = 0; attempt < RECOVERY_ATTEMPTS; attempt++) {
      try {
        return await step();
      } catch (e) {
        error = e;
        deps.log?.(`recovery of ${id} failed (attempt ${attempt + 1} of ${RECOVERY_ATTEMPTS}): ${(e as Error).message}`);
        await sleep(RETRY_PAUSE_MS);
      }
    }
    try {
      await manager.withRecord(id, async (r, t) => {
        if (r.state === 'failed' || r.state === 'terminated' || r.state === 'hibernated') return;
        if (r.sandboxId) await t.driver?.destroy(r.sandboxId).catch((e) => deps.log?.(`cannot remove sandbox ${r.sandboxId}: ${(e as Error).message}`));
        await t.transition('failed', { failureReason: `recovery could not re-adopt the sandbox: ${(error as Error).message}`, sandboxId: null });
      });
      report.adopted = report.adopted.filter((x) => x !== id);
      if (!report.failed.includes(id)) report.failed.push(id);
    } catch (e) {
      deps.log?.(`cannot mark ${id} failed: ${(e as Error).message}`);
    }
  }

  // Orphans: sandboxes no live record points at (e.g. the server died between runsc and the store).
  const owned = new Set((await store.sessions.list({ states: LIVE_STATES })).map((r) => r.sandboxId));
  for (const d of Object.values(deps.drivers)) {
    if (!d) continue;
    for (const id of await d.list().catch(() => [] as string[])) {
      if (owned.has(id)) continue;
      await d.destroy(id).catch((e) => deps.log?.(`cannot remove orphan sandbox ${id}: ${(e as Error).message}`));
      report.orphansRemoved.push(id);
    }
  }
  const known = new Set((await store.snapshots.list()).map((s) => s.id));
  for (const s of await store.sessions.list({ states: ['hibernating'] })) if (s.hibernationSnapshotId) known.add(s.hibernationSnapshotId);
  for (const id of await deps.snapshots.list().catch(() => [] as string[])) {
    if (known.has(id)) continue;
    try {
      await deps.snapshots.delete(id);
      report.snapshotDirsRemoved.push(id);
    } catch (e) {
      deps.log?.(`cannot remove snapshot directory ${id}: ${(e as Error).message}`);
    }
  }
  report.elapsedMs = Date.now() - t0;
  return report;
}
