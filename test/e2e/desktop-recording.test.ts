/**
 * Desktop recordings end to end (issue 11) on real runsc with the desktop image's real ffmpeg: a desktop
 * session records its screen while a command paints it red, through a hibernate and a wake; the video is
 * MPEG-TS (a 0x47 sync byte every 188 bytes), H.264 at the screen's size with the frames of the whole span
 * (the machine's own ffprobe), its first frame the desktop's grey and its last one red. The CLI shows the
 * state, starts a second recording that replaces the first, stops it and writes the video to a file. Then
 * the session ends and no byte of the video is left under the data directory (while it was hibernated,
 * the same search found it in the checkpoint image: the search sees through the images).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DESKTOP_RECORDING_PATH, desktopRecordingExecId, sha256Hex } from '../../src/core/index.js';
import type { Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { filesContaining } from '../helpers/find-bytes.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('desktop recording e2e', gvisorMissing());

const W = 640;
const H = 480;
const MIB = 1024 * 1024;

function isMpegTs(v: Uint8Array): boolean {
  if (v.length === 0 || v.length % 188 !== 0) return false;
  for (let i = 0; i < v.length; i += 188) if (v[i] !== 0x47) return false;
  return true;
}

/** The CLI as users run it (dist/, compiled by test/global-setup.ts), stdout a pipe. */
function cli(srv: TestServer, args: string[]): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const main = [join(REPO, 'dist', 'src', 'cli', 'main.js'), join(REPO, 'dist', 'cli', 'main.js')].find((p) => existsSync(p));
  if (!main) throw new Error('dist/ has no CLI: tsc -p tsconfig.build.json');
  const child = spawn(process.execPath, [main, ...args], { env: { ...process.env, BERTH_URL: srv.url, BERTH_TOKEN: srv.rootKey }, stdio: ['ignore', 'pipe', 'pipe'] });
  const out: Buffer[] = [];
  let err = '';
  child.stdout.on('data', (d: Buffer) => out.push(d));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((done) => child.on('close', (code) => done({ code, stdout: Buffer.concat(out), stderr: err })));
}

describe.skipIf(skip)('desktop recordings (real runsc, real ffmpeg)', () => {
  let srv: TestServer;
  let s: Session;

  /** The RGB at a quarter of the screen in every frame of the video, decoded inside the machine (2x2 pixels a frame; the centre holds the pointer, which the video shows). */
  const centres = async (): Promise<Array<[number, number, number]>> => {
    const r = await s.run(['ffmpeg', '-v', 'error', '-i', DESKTOP_RECORDING_PATH, '-vf', `crop=2:2:${W / 4}:${H / 4}`, '-fps_mode', 'passthrough', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-']);
    expect(r.code, r.stderr).toBe(0);
    const out: Array<[number, number, number]> = [];
    for (let i = 0; i + 12 <= r.stdoutBytes.length; i += 12) out.push([r.stdoutBytes[i]!, r.stdoutBytes[i + 1]!, r.stdoutBytes[i + 2]!]);
    return out;
  };

  beforeAll(async () => {
    srv = await startTestServer();
    s = await srv.client.sessions.create({ desktop: { width: W, height: H }, memoryMb: 512 });
  }, 240_000);
  afterAll(async () => {
    await srv?.destroy();
  }, 120_000);

  it('records what happens on the screen, through hibernate and wake, into MPEG-TS; the session takes it along when it ends', async () => {
    expect(await s.desktop.info()).toEqual({ sessionId: s.id, screen: { width: W, height: H }, recording: expect.objectContaining({ recording: false, bytes: 0, execId: null }) });

    const started = await s.desktop.record({ maxBytes: 16 * MIB });
    // It answers once the first frame is in the file, so what happens next is recorded.
    expect(started).toMatchObject({ recording: true, execId: desktopRecordingExecId(0), cap: 16 * MIB, fps: 5, endedAt: null });
    expect(started.bytes).toBeGreaterThan(0);
    await expect(s.desktop.record()).rejects.toMatchObject({ code: 'conflict' });
    expect((await s.processes.list()).find((p) => p.execId === started.execId)).toMatchObject({ state: 'running', argv: expect.arrayContaining(['ffmpeg', 'x11grab', '-fs', String(16 * MIB)]) });

    await sleep(1500); // the desktop's own grey first
    expect((await s.run(['xsetroot', '-display', ':0', '-solid', 'red'])).code).toBe(0);
    await sleep(3000);

    // Hibernate mid-recording: file and ffmpeg are the machine's, so the checkpoint image holds the video.
    const sofar = await s.desktop.recording();
    expect(isMpegTs(sofar)).toBe(true);
    // A packet inside one 4 KiB page of the file (pages need not be adjacent in the image).
    let k = Math.floor(sofar.length / 188 / 2);
    while (((k * 188) % 4096) + 188 > 4096) k++;
    const needle = Buffer.from(sofar.subarray(k * 188, (k + 1) * 188));
    await s.hibernate();
    expect((await filesContaining(srv.dataDir, needle)).length, 'the search sees the video inside the checkpoint image').toBeGreaterThan(0);
    await s.wake();
    const woke = (await s.desktop.info()).recording;
    expect(woke).toMatchObject({ recording: true, execId: started.execId });
    await sleep(2000);
    expect((await s.desktop.info()).recording.bytes, 'ffmpeg goes on writing after the wake').toBeGreaterThan(woke.bytes);

    const stopped = await s.desktop.stopRecording();
    expect(stopped).toMatchObject({ stopped: true, recording: false, execId: started.execId, endedAt: expect.any(String) });
    expect((await s.desktop.stopRecording()).stopped).toBe(false);
    const video = await s.desktop.recording();
    expect(isMpegTs(video)).toBe(true);
    expect(video.length).toBeGreaterThan(10_000);
    expect(video.length).toBe(stopped.bytes - (stopped.bytes % 188));
    // What was downloaded is the machine's file, byte for byte.
    const inside = await s.run(['sh', '-c', `head -c ${video.length} ${DESKTOP_RECORDING_PATH} | sha256sum`]);
    expect(inside.stdout.split(' ')[0]).toBe(sha256Hex(video));

    // The host has no ffprobe to rely on; the desktop image has: H.264 at the screen's size, every frame of the span.
    const probe = await s.run(['ffprobe', '-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries', 'stream=codec_name,width,height,nb_read_frames', '-of', 'json', DESKTOP_RECORDING_PATH]);
    expect(probe.code, probe.stderr).toBe(0);
    const stream = (JSON.parse(probe.stdout) as { streams: Array<{ codec_name: string; width: number; height: number; nb_read_frames: string }> }).streams[0]!;
    expect([stream.codec_name, stream.width, stream.height]).toEqual(['h264', W, H]);
    expect(Number(stream.nb_read_frames), 'about 5 fps over some 7 s').toBeGreaterThanOrEqual(20);
    const frames = await centres();
    expect(frames.length).toBe(Number(stream.nb_read_frames));
    const grey = ([r, g, b]: [number, number, number]) => r < 120 && g < 120 && b < 140 && Math.abs(r - g) < 40;
    const red = ([r, g, b]: [number, number, number]) => r > 180 && g < 80 && b < 80;
    // The desktop's grey (#3b4252) until xsetroot, red from then on (through the hibernate) to the end.
    const turn = frames.findIndex(red);
    expect(turn, `frames: ${JSON.stringify(frames)}`).toBeGreaterThan(2);
    expect(frames.slice(0, turn).every(grey) && frames.slice(turn).every(red), `frames: ${JSON.stringify(frames)}`).toBe(true);

    // The CLI: state, a second recording (which replaces the video), stop, the video to a file.
    const shown = await cli(srv, ['desktop', s.id, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(JSON.parse(shown.stdout.toString())).toMatchObject({ screen: { width: W, height: H }, recording: { recording: false, execId: started.execId } });
    const again = await cli(srv, ['desktop', 'record', s.id, '--max-bytes', String(2 * MIB), '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout.toString())).toMatchObject({ recording: true, execId: desktopRecordingExecId(1), cap: 2 * MIB });
    await sleep(1500);
    const halt = await cli(srv, ['desktop', 'record', s.id, '--stop']);
    expect([halt.code, halt.stdout.toString()], halt.stderr).toEqual([0, expect.stringMatching(/^stopped: \d+ bytes recorded/)]);
    const file = await cli(srv, ['desktop', 'recording', s.id]);
    expect(file.code, file.stderr).toBe(0);
    expect(isMpegTs(file.stdout)).toBe(true);
    // Replaced, not appended: every frame of the file is red now, none of the first video's grey is left.
    // (Not a byte search for a packet of the first video: the tables, and the data of two flat pictures that
    // differ only in colour, come out byte-identical in every recording.)
    const second = await centres();
    expect(second.length, 'frames of the second recording').toBeGreaterThan(0);
    expect(second.every(red), `frames: ${JSON.stringify(second)}`).toBe(true);

    const actions = (await srv.client.audit.query({ sessionId: s.id })).map((e) => e.action).filter((a) => a.startsWith('session.desktop.record'));
    expect(actions).toEqual(['session.desktop.record.start', 'session.desktop.record.stop', 'session.desktop.record.start', 'session.desktop.record.stop']);

    await s.terminate();
    expect(await filesContaining(srv.dataDir, needle), 'no byte of the video is left on the host').toEqual([]);
  }, 300_000);
});
