/**
 * The desktop-recording routes over the real engine and the in-memory driver (which runs no desktop and has
 * no ffmpeg: ffmpeg itself is test/e2e/desktop-recording.test.ts). What is proved here is the engine's
 * bookkeeping at the driver port: no_desktop, agent tokens refused, cap limits, conflict while a recording
 * process runs, stop as a no-op or a kill that waits for the exit, ffmpeg failing at once reported with its
 * message, the next recording taking the next process name, reads in whole MPEG-TS packets, and audit.
 * Every response is validated against the OpenAPI document as it passes.
 */
import { describe, expect, it } from 'vitest';
import { DESKTOP_RECORDING_PATH, desktopRecordingExecId } from '../core/index.js';
import { useCheckedApp } from '../../test/helpers/checked-app.js';

const h = useCheckedApp();

async function call(method: string, path: string, body?: unknown, headers = h.auth) {
  const res = await h.app.fetch(new Request(`http://127.0.0.1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }));
  const buf = Buffer.from(await res.arrayBuffer());
  let json: any;
  try {
    json = JSON.parse(buf.toString());
  } catch {
    json = undefined;
  }
  return { status: res.status, json, buf, headers: res.headers };
}
const err = (r: { status: number; json: any }) => [r.status, r.json?.error?.code, r.json?.error?.details?.reason];

/** A session whose record says it has a desktop (the memory driver runs none: the engine only reads the record). */
async function desktopSession(memoryMb = 512): Promise<{ id: string; agentToken: string; sandboxId: string }> {
  const s = (await call('POST', '/v1/sessions', { memoryMb })).json as { id: string; agentToken: string };
  const r = (await h.t.store.sessions.get(s.id))!;
  await h.t.store.sessions.put({ ...r, settings: { ...r.settings, desktop: { width: 640, height: 480 } } });
  return { ...s, sandboxId: r.sandboxId! };
}

describe('desktop recordings over HTTP (in-memory driver)', () => {
  it('a session without a desktop: every route answers 409 invalid_state no_desktop', async () => {
    const s = (await call('POST', '/v1/sessions', {})).json as { id: string };
    const base = `/v1/sessions/${s.id}/desktop`;
    expect(err(await call('GET', base))).toEqual([409, 'invalid_state', 'no_desktop']);
    expect(err(await call('POST', `${base}/recording/start`, {}))).toEqual([409, 'invalid_state', 'no_desktop']);
    expect(err(await call('POST', `${base}/recording/stop`))).toEqual([409, 'invalid_state', 'no_desktop']);
    expect(err(await call('GET', `${base}/recording`))).toEqual([409, 'invalid_state', 'no_desktop']);
  });

  it('agent tokens are refused; another session is not found', async () => {
    const s = await desktopSession();
    const other = await desktopSession();
    const agent = { authorization: `Bearer ${s.agentToken}`, 'content-type': 'application/json' };
    expect(err(await call('POST', `/v1/sessions/${s.id}/desktop/recording/start`, {}, agent))[0]).toBe(403);
    expect(err(await call('GET', `/v1/sessions/${s.id}/desktop/recording`, undefined, agent))[0]).toBe(403);
    expect(err(await call('GET', `/v1/sessions/${other.id}/desktop`, undefined, agent))[0]).toBe(404);
  });

  it('nothing recorded yet: the state, stop is a no-op, the video is not found', async () => {
    const s = await desktopSession();
    const base = `/v1/sessions/${s.id}/desktop`;
    const info = await call('GET', base);
    expect(info.json).toEqual({ sessionId: s.id, screen: { width: 640, height: 480 }, recording: { recording: false, bytes: 0, startedAt: null, endedAt: null, cap: null, execId: null, fps: 5 } });
    expect((await call('POST', `${base}/recording/stop`)).json).toMatchObject({ stopped: false, recording: false, execId: null });
    expect(err(await call('GET', `${base}/recording`))).toEqual([404, 'not_found', 'no_recording']);
    expect((await h.t.engine.auditQuery(h.t.root, { sessionId: s.id })).map((e) => e.action)).not.toContain('session.desktop.record.stop');
  });

  it('caps: at least 1 MiB, at most half the session memory and half its file room (the video is one of its files)', async () => {
    const s = await desktopSession(256); // file room: 128 MiB, the default half
    const start = `/v1/sessions/${s.id}/desktop/recording/start`;
    expect(err(await call('POST', start, { maxBytes: 1000 }))[0]).toBe(400);
    const tooBig = await call('POST', start, { maxBytes: 64 * 1024 * 1024 + 1 });
    expect([tooBig.status, tooBig.json.error.details]).toEqual([400, { field: 'maxBytes', min: 1024 * 1024, max: 64 * 1024 * 1024 }]);
    expect(tooBig.json.error.message).toMatch(/half the session's 256 MiB of memory and of its 128 MiB file room/);
    expect(err(await call('POST', start, { maxBytes: 2 ** 40 }))[0]).toBe(400);
    expect(err(await call('POST', start, { fps: 30 }))[0]).toBe(400);
  });

  it('ffmpeg failing at once is sandbox_failed with its message; the next recording takes the next name', async () => {
    const s = await desktopSession();
    const base = `/v1/sessions/${s.id}/desktop`;
    const failed = await call('POST', `${base}/recording/start`, {});
    // The memory driver's userland has no ffmpeg: exit 127, "command not found".
    expect([failed.status, failed.json.error.code]).toEqual([503, 'sandbox_failed']);
    expect(failed.json.error.message).toMatch(/ffmpeg exited with 127: .*not found/);
    const after = (await call('GET', base)).json.recording;
    // The default cap of a 512 MiB session is a quarter of it.
    expect(after).toMatchObject({ recording: false, execId: desktopRecordingExecId(0), cap: 128 * 1024 * 1024, startedAt: expect.any(String), endedAt: expect.any(String) });
    const procs = (await call('GET', `/v1/sessions/${s.id}/processes`)).json.processes as Array<{ execId: string; argv: string[] }>;
    expect(procs[0]!.argv.join(' ')).toContain('-f x11grab -framerate 5 -video_size 640x480 -i :0');
    expect(procs[0]!.argv.join(' ')).toContain(`-fs ${128 * 1024 * 1024} -f mpegts -y ${DESKTOP_RECORDING_PATH}`);
    await call('POST', `${base}/recording/start`, { maxBytes: 2 * 1024 * 1024 });
    expect((await call('GET', base)).json.recording).toMatchObject({ execId: desktopRecordingExecId(1), cap: 2 * 1024 * 1024 });
  });

  it('a running recording: start is a conflict; stop kills it, waits for its exit and is audited', async () => {
    const s = await desktopSession();
    const base = `/v1/sessions/${s.id}/desktop`;
    // Stands in for ffmpeg: a process under a recording's name that runs until signalled.
    await h.t.driver.startProcess(s.sandboxId, desktopRecordingExecId(3), { argv: ['sleep', '60', '-fs', '5000000'], stdin: false });
    expect((await call('GET', base)).json.recording).toMatchObject({ recording: true, execId: desktopRecordingExecId(3), cap: 5_000_000, endedAt: null });
    const again = await call('POST', `${base}/recording/start`, {});
    expect([again.status, again.json.error.code, again.json.error.details.execId]).toEqual([409, 'conflict', desktopRecordingExecId(3)]);
    const stopped = await call('POST', `${base}/recording/stop`, {});
    expect(stopped.json).toMatchObject({ stopped: true, recording: false, execId: desktopRecordingExecId(3), endedAt: expect.any(String) });
    expect((await call('POST', `${base}/recording/stop`)).json.stopped).toBe(false);
    const audit = (await h.t.engine.auditQuery(h.t.root, { sessionId: s.id })).filter((e) => e.action.startsWith('session.desktop.record'));
    expect(audit.map((e) => [e.action, e.data.execId])).toEqual([['session.desktop.record.stop', desktopRecordingExecId(3)]]);
  });

  it('the video is read in whole MPEG-TS packets, as video/mp2t, and metered', async () => {
    const s = await desktopSession();
    const packets = Buffer.alloc(188 * 3 + 100, 0x11);
    for (let i = 0; i < 4; i++) packets[i * 188] = 0x47;
    await h.t.driver.mkdir(s.sandboxId, '/var/lib/berth-desktop', { parents: true });
    await h.t.driver.writeFile(s.sandboxId, DESKTOP_RECORDING_PATH, (async function* () {
      yield packets;
    })());
    const info = (await call('GET', `/v1/sessions/${s.id}/desktop`)).json.recording;
    expect(info).toMatchObject({ bytes: packets.length, execId: null });
    const got = await call('GET', `/v1/sessions/${s.id}/desktop/recording`);
    expect([got.status, got.headers.get('content-type')]).toEqual([200, 'video/mp2t']);
    expect(got.buf.equals(packets.subarray(0, 188 * 3))).toBe(true);
    await h.t.engine.flush();
    expect((await h.t.store.sessions.get(s.id))!.metering.bytesOut).toBeGreaterThanOrEqual(188 * 3);
  });
});
