/**
 * Issue 7 §11: SIGKILL of the server right after it accepted a POST /v1/sessions with an Idempotency-Key,
 * and during a fork with one. After the restart, a retry with the same key answers with what the first
 * attempt created (or creates it, if it had created nothing) and exactly one session (one fork's
 * branches) exists. Real server process, real runsc, real SQLite.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { client, exited, killGroup, scrub, startServerProcess, stopServerProcess, tempDataDir, type ServerProcess } from './harness.js';

const skip = skipReason('idempotency-kill faults', gvisorMissing());

async function post(s: ServerProcess, path: string, key: string, body: unknown): Promise<{ status: number; json: any; headers: Headers }> {
  const res = await fetch(`${s.url}/v1${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.token}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json(), headers: res.headers };
}

describe.skipIf(skip)('issue 7 §11: SIGKILL after an idempotent create was accepted', () => {
  let dataDir = '';
  let server: ServerProcess | undefined;
  afterAll(async () => {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  });

  it('a retry with the same key after the restart finds the one session; none is created twice', { timeout: 600_000 }, async () => {
    dataDir = await tempDataDir('idemkill');
    server = await startServerProcess({ dataDir });
    let berth = client(server);

    // 1. Killed once the session record exists (the machine is starting): the retry gets that session.
    const first = post(server, '/sessions', 'kill-after-accept', { memoryMb: 256 }).catch(() => undefined);
    const deadline = Date.now() + 30_000;
    while ((await berth.sessions.list()).length === 0 && Date.now() < deadline) await sleep(5);
    const seen = (await berth.sessions.list()).map((s) => s.id);
    expect(seen).toHaveLength(1);
    killGroup(server.child, 'SIGKILL');
    await exited(server);
    expect(await first).toBeUndefined(); // the answer was lost
    server = await startServerProcess({ dataDir });
    berth = client(server);
    const retry = await post(server, '/sessions', 'kill-after-accept', { memoryMb: 256 });
    expect(retry.status, JSON.stringify(retry.json)).toBe(200);
    expect(retry.headers.get('idempotency-recovered')).toBe('true');
    expect(retry.json.id).toBe(seen[0]);
    const all = await berth.sessions.list();
    expect(all.map((s) => s.id)).toEqual(seen);
    // Again: the same answer, never a second session.
    expect((await post(server, '/sessions', 'kill-after-accept', { memoryMb: 256 })).json.id).toBe(seen[0]);

    // 2. Killed mid-fork: the retry answers with the branches the first attempt created, or makes them.
    const base = await berth.sessions.create({ memoryMb: 256 });
    const snap = await base.snapshot({ name: 'forkme' });
    const before = new Set((await berth.sessions.list()).map((s) => s.id));
    const fork = post(server, `/snapshots/${snap.snapshotId}/fork`, 'fork-kill', { count: 2 }).catch(() => undefined);
    await sleep(300);
    killGroup(server.child, 'SIGKILL');
    await exited(server);
    await fork;
    server = await startServerProcess({ dataDir });
    berth = client(server);
    const made = (await berth.sessions.list()).map((s) => s.id).filter((id) => !before.has(id));
    const again = await post(server, `/snapshots/${snap.snapshotId}/fork`, 'fork-kill', { count: 2 });
    expect([200, 201], JSON.stringify(again.json)).toContain(again.status);
    const answered = (again.json.sessions as Array<{ id: string }>).map((s) => s.id).sort();
    if (made.length > 0) expect(answered).toEqual([...made].sort());
    const after = (await berth.sessions.list()).map((s) => s.id).filter((id) => !before.has(id));
    expect(after.sort()).toEqual(answered);
    expect(after.length).toBeLessThanOrEqual(2);

    for (const s of await berth.sessions.list()) await (await berth.sessions.get(s.id)).terminate().catch(() => undefined);
    for (const x of await berth.snapshots.list()) await berth.snapshots.delete(x.id);
    await stopServerProcess(server);
    server = undefined;
  });
});
