/**
 * The engine's failure paths, without root: the real SessionManager, gate and SQLite over the in-memory
 * driver, whose faults are injected at the port (failNext, crash). The same paths under real runsc are in
 * test/e2e; here each rollback is checked completely: state, records, images, sandboxes, the source.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SandboxError, type AppError } from '../core/index.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let t: TestEngine;
beforeEach(async () => {
  t = await createTestEngine();
});
afterEach(async () => {
  await t.close();
});

const boom = () => new SandboxError('injected: the backend failed');
const codeOf = (p: Promise<unknown>) => p.then(() => 'resolved', (e: AppError) => e.code ?? 'no-code');
const text = (s: string) => (async function* () {
  yield new TextEncoder().encode(s);
})();

async function readText(id: string, path: string): Promise<string> {
  let out = '';
  for await (const c of await t.engine.readFile(t.root, id, path)) out += new TextDecoder().decode(c);
  return out;
}

async function sessionWithFile(content = 'kept') {
  const { session } = await t.engine.createSession(t.root, {});
  await t.engine.writeFile(t.root, session.id, '/root/f', text(content));
  return session;
}

describe('hibernate that fails', () => {
  it('rolls back to running: the partial image is removed and the machine is untouched', async () => {
    const s = await sessionWithFile();
    t.driver.failNext('checkpoint', boom(), { midway: true });
    expect(await codeOf(t.engine.hibernate(t.root, s.id))).toBe('sandbox_failed');
    const after = await t.engine.getSession(t.root, s.id);
    expect(after).toMatchObject({ state: 'running', hibernationSnapshotId: null, sandboxId: s.sandboxId });
    expect(await t.snapshots.list()).toEqual([]);
    expect(await t.store.snapshots.list({ sessionId: s.id })).toEqual([]);
    expect(t.driver.has(s.sandboxId as string)).toBe(true);
    expect(await readText(s.id, '/root/f')).toBe('kept');
    const trail = (await t.engine.auditQuery(t.root, { sessionId: s.id })).map((e) => [e.action, e.outcome, e.data.to ?? null]);
    expect(trail.slice(-3)).toEqual([
      ['session.state', 'ok', 'hibernating'],
      ['session.state', 'ok', 'running'],
      ['session.hibernate', 'error', null],
    ]);
    // And the next attempt works.
    expect((await t.engine.hibernate(t.root, s.id)).state).toBe('hibernated');
  });

  it('fails the session when the machine did not survive the failed checkpoint', async () => {
    const s = await sessionWithFile();
    t.driver.failNext('checkpoint', boom());
    t.driver.failNext('adopt', boom());
    expect(await codeOf(t.engine.hibernate(t.root, s.id))).toBe('sandbox_failed');
    const after = await t.engine.getSession(t.root, s.id);
    expect(after.state).toBe('failed');
    expect(after.failureReason).toMatch(/^hibernate failed: /);
    expect(await t.snapshots.list()).toEqual([]);
  });
});

describe('wake that fails', () => {
  it('rolls back to hibernated: the half-restored sandbox is destroyed, the image kept, and a later wake works', async () => {
    const s = await sessionWithFile('before sleep');
    const hib = await t.engine.hibernate(t.root, s.id);
    const image = hib.hibernationSnapshotId as string;
    const sandboxesBefore = await t.driver.list();
    t.driver.failNext('restore', boom(), { midway: true });
    expect(await codeOf(t.engine.wake(t.root, s.id))).toBe('sandbox_failed');
    const after = await t.engine.getSession(t.root, s.id);
    expect(after).toMatchObject({ state: 'hibernated', hibernationSnapshotId: image, sandboxId: null });
    expect(await t.driver.list()).toEqual(sandboxesBefore);
    expect(await t.snapshots.list()).toEqual([image]);
    expect(await t.store.snapshots.get(image)).toBeDefined();
    expect((await t.engine.wake(t.root, s.id)).state).toBe('running');
    expect(await readText(s.id, '/root/f')).toBe('before sleep');
  });

  it('a transparent wake (exec on a hibernated session) that fails leaves it hibernated', async () => {
    const s = await sessionWithFile();
    await t.engine.hibernate(t.root, s.id);
    t.driver.failNext('restore', boom());
    expect(await codeOf(t.engine.exec(t.root, s.id, { argv: ['true'] }))).toBe('sandbox_failed');
    expect((await t.engine.getSession(t.root, s.id)).state).toBe('hibernated');
    const { handle } = await t.engine.exec(t.root, s.id, { argv: ['cat', '/root/f'] });
    expect(await handle.wait()).toMatchObject({ code: 0 });
  });
});

describe('fork that fails', () => {
  it('leaves no half-made sessions, no sandboxes of its own, and the source and its snapshot untouched', async () => {
    const s = await sessionWithFile('source');
    const snap = await t.engine.snapshot(t.root, s.id, { name: 'base' });
    const sandboxesBefore = await t.driver.list();
    t.driver.failNext('restore', boom(), { after: 1, midway: true });
    expect(await codeOf(t.engine.fork(t.root, snap.id, 3))).toBe('sandbox_failed');
    expect((await t.engine.listSessions(t.root)).map((x) => x.id)).toEqual([s.id]);
    expect(await t.driver.list()).toEqual(sandboxesBefore);
    const branches = (await t.store.sessions.list({ states: ['creating', 'running', 'paused', 'failed'] })).filter((r) => r.parentSnapshotId === snap.id);
    expect(branches).toEqual([]);
    expect((await t.engine.getSession(t.root, s.id)).state).toBe('running');
    expect(await readText(s.id, '/root/f')).toBe('source');
    expect((await t.engine.getSnapshot(t.root, snap.id)).id).toBe(snap.id);
    expect(await t.snapshots.list()).toEqual([snap.id]);
    // The snapshot still forks.
    const ok = await t.engine.fork(t.root, snap.id, 2);
    expect(ok.map((b) => b.session.state)).toEqual(['running', 'running']);
  });

  it('the branches\' agent tokens die with them', async () => {
    const s = await sessionWithFile();
    const snap = await t.engine.snapshot(t.root, s.id);
    t.driver.failNext('restore', boom(), { after: 1 });
    await expect(t.engine.fork(t.root, snap.id, 2)).rejects.toMatchObject({ code: 'sandbox_failed' });
    const dead = (await t.store.sessions.list({ states: ['terminated'] })).filter((r) => r.parentSnapshotId === snap.id);
    expect(dead).toHaveLength(2);
  });
});

describe('snapshot that fails', () => {
  it('keeps the source running with its files, and leaves no snapshot record or image', async () => {
    const s = await sessionWithFile('still here');
    t.driver.failNext('checkpoint', boom(), { midway: true });
    expect(await codeOf(t.engine.snapshot(t.root, s.id, { name: 'x' }))).toBe('sandbox_failed');
    expect((await t.engine.getSession(t.root, s.id)).state).toBe('running');
    expect(await t.engine.listSnapshots(t.root)).toEqual([]);
    expect(await t.snapshots.list()).toEqual([]);
    expect(await readText(s.id, '/root/f')).toBe('still here');
  });

  it('a paused source stays paused', async () => {
    const s = await sessionWithFile();
    await t.engine.pause(t.root, s.id);
    t.driver.failNext('checkpoint', boom());
    expect(await codeOf(t.engine.snapshot(t.root, s.id))).toBe('sandbox_failed');
    expect((await t.engine.getSession(t.root, s.id)).state).toBe('paused');
  });
});

describe('create and crashes', () => {
  it('a create that fails leaves a failed record and no sandbox', async () => {
    t.driver.failNext('create', boom());
    expect(await codeOf(t.engine.createSession(t.root, {}))).toBe('sandbox_failed');
    const [r] = await t.store.sessions.list({ states: ['failed'] });
    expect(r?.failureReason).toMatch(/^create failed: /);
    expect(await t.driver.list()).toEqual([]);
  });

  it('a sandbox that dies on its own fails its session with the reason', async () => {
    const s = await sessionWithFile();
    t.driver.crash(s.sandboxId as string, 'killed by the OOM killer');
    await expect.poll(async () => (await t.engine.getSession(t.root, s.id)).state).toBe('failed');
    expect((await t.engine.getSession(t.root, s.id)).failureReason).toBe('killed by the OOM killer');
    expect(await codeOf(t.engine.exec(t.root, s.id, { argv: ['true'] }))).toBe('invalid_state');
  });
});
