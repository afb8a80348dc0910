/**
 * Recordings of a session's desktop (issue 11): "the session's desktop can be recorded (a video per
 * session, capped, removed with the session) for review". ffmpeg grabs the X display (DESKTOP_DISPLAY) at
 * DESKTOP_RECORDING_FPS into MPEG-TS at DESKTOP_RECORDING_PATH, inside the machine, as a background process
 * (core/desktop.ts names it). MPEG-TS needs no trailer, so a video cut anywhere (a stop, a kill, the size cap)
 * plays up to the cut; it is read out in whole 188-byte packets.
 *
 * Like processes.ts, the engine holds nothing: whether a recording runs, since when and with which cap is
 * the sandbox's process record (its argv carries `-fs CAP`); its size is the file's. Because process and
 * file belong to the machine:
 * - terminate wipes the video with the machine (nothing of it is ever on the host);
 * - hibernate and wake keep both: a recording running at hibernate goes on writing after the wake (the
 *   video skips the time asleep);
 * - a fork branch starts with a copy of the video so far, and its restored ffmpeg goes on writing into the
 *   branch's own copy, so each branch's video shows its own screen from the fork on. Stop it per branch.
 *
 * Operator calls (agent tokens are refused, as for exec: steps.session and steps.live check the principal).
 * Start and stop are audited (`session.desktop.record.start` / `.stop`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AppError,
  DESKTOP_DISPLAY,
  DESKTOP_RECORDING_BYTES,
  DESKTOP_RECORDING_DIR,
  DESKTOP_RECORDING_FPS,
  DESKTOP_RECORDING_PATH,
  InvalidArgumentError,
  MPEG_TS_PACKET_BYTES,
  NotFoundError,
  SandboxError,
  desktopRecordingExecId,
  desktopRecordingSeq,
  throwIfAborted,
  type CallOptions,
  type DesktopSettings,
  type Principal,
  type ProcessInfo,
  type SandboxDriver,
  type SessionRecord,
} from '../core/index.js';
import { KeyedMutex } from './lock.js';
import type { PendingCounts } from './metering.js';
import { noDesktopError } from './vnc.js';

export interface DesktopRecordingSteps {
  /** The session record as an operator may see it (agents and watchers refused), without waking it. */
  session(p: Principal, sessionId: string): Promise<SessionRecord>;
  /** Its running machine (wakes a hibernated one). */
  live(p: Principal, sessionId: string, opts: CallOptions): Promise<{ r: SessionRecord; d: SandboxDriver; sandboxId: string }>;
  audit(p: Principal, tenantId: string, sessionId: string, action: string, data: Record<string, unknown>): Promise<unknown>;
  meter(sessionId: string, f: Partial<PendingCounts>): void;
}

export interface RecordingStatus {
  /** ffmpeg is writing the video now. */
  recording: boolean;
  /** Size of the video so far, bytes (0: none yet). */
  bytes: number;
  /** When the latest recording started and ended (ms since the epoch, the sandbox's clock); null: none, or still running. */
  startedAt: number | null;
  endedAt: number | null;
  /** The latest recording's size cap, bytes; null when none was started. */
  cap: number | null;
  /** Its background process (listed by `berth ps`); null when none was started. */
  execId: string | null;
}

export interface DesktopInfo {
  sessionId: string;
  screen: DesktopSettings;
  recording: RecordingStatus;
}

export interface DesktopService {
  /** The screen and the recording's state. invalid_state (details.reason no_desktop) without a desktop. */
  info(p: Principal, sessionId: string, opts?: CallOptions): Promise<DesktopInfo>;
  /**
   * Starts recording (replacing an earlier video) and resolves once ffmpeg writes. conflict while one
   * records; invalid_argument for a maxBytes out of range; sandbox_failed when ffmpeg ends at once.
   */
  start(p: Principal, sessionId: string, opts?: CallOptions & { maxBytes?: number }): Promise<RecordingStatus>;
  /** Ends the recording (the video stays) and resolves once its process has exited; stopped false when none ran. */
  stop(p: Principal, sessionId: string, opts?: CallOptions): Promise<RecordingStatus & { stopped: boolean }>;
  /** The video as it is now (whole MPEG-TS packets), streamed; not_found when none was recorded. */
  read(p: Principal, sessionId: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>>;
}

/** How long start waits for ffmpeg's first bytes (1-4 s measured under load: loading libx264 and opening the display), and stop for its exit after SIGTERM, then after SIGKILL. */
const START_WAIT_MS = 15_000;
const TERM_GRACE_MS = 3_000;
const KILL_WAIT_MS = 5_000;
const POLL_MS = 100;
const SIGTERM = 15;
const SIGKILL = 9;
const MIB = 1024 * 1024;

/**
 * libx264 at its fastest, a constant quality that keeps text readable, a keyframe every 5 s (a cut video
 * plays from the last one), yuv420p for every player (which needs even sides: the crop drops an odd
 * column or row). -flush_packets: every packet reaches the file at once, so `bytes` is current and a kill
 * loses nothing written. -fs: ffmpeg ends by itself at the cap.
 */
function ffmpegArgv(screen: DesktopSettings, cap: number): string[] {
  return [
    'ffmpeg', '-nostdin', '-hide_banner', '-loglevel', 'error',
    '-f', 'x11grab', '-framerate', String(DESKTOP_RECORDING_FPS), '-video_size', `${screen.width}x${screen.height}`, '-i', DESKTOP_DISPLAY,
    '-vf', 'crop=trunc(iw/2)*2:trunc(ih/2)*2',
    '-c:v', 'libx264', '-preset', 'ultrafast', '-crf', '35', '-g', String(DESKTOP_RECORDING_FPS * 5), '-pix_fmt', 'yuv420p',
    '-flush_packets', '1', '-fs', String(cap), '-f', 'mpegts', '-y', DESKTOP_RECORDING_PATH,
  ];
}

/** The cap a recording was started with, from its argv. */
function capOf(info: ProcessInfo): number | null {
  const i = info.argv.indexOf('-fs');
  const n = i >= 0 ? Number(info.argv[i + 1]) : NaN;
  return Number.isSafeInteger(n) ? n : null;
}

/** The machine's latest recording process (the highest sequence number), if any. */
function latest(procs: ProcessInfo[]): ProcessInfo | undefined {
  let best: ProcessInfo | undefined;
  for (const x of procs) {
    const n = desktopRecordingSeq(x.execId);
    if (n !== undefined && (best === undefined || n > (desktopRecordingSeq(best.execId) as number))) best = x;
  }
  return best;
}

/**
 * Default and largest cap for a session (see DESKTOP_RECORDING_BYTES): the video is one of its files, so at most
 * half its file room (diskMb) and half its memory (where a gVisor session's files live); by default a quarter of
 * the memory, within that.
 */
export function recordingCaps(s: { memoryMb: number; diskMb?: number }): { default: number; max: number } {
  const mem = s.memoryMb * MIB;
  const max = Math.min(DESKTOP_RECORDING_BYTES.max, Math.floor(mem / 2), s.diskMb === undefined ? Infinity : Math.floor((s.diskMb * MIB) / 2));
  return { default: Math.min(DESKTOP_RECORDING_BYTES.default, Math.floor(mem / 4), max), max };
}

function checkCap(maxBytes: number | undefined, r: SessionRecord): number {
  const caps = recordingCaps(r.settings);
  if (maxBytes === undefined) return caps.default;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < DESKTOP_RECORDING_BYTES.min || maxBytes > caps.max) {
    const room = r.settings.diskMb === undefined ? '' : ` and of its ${r.settings.diskMb} MiB file room`;
    throw new InvalidArgumentError(`maxBytes: must be an integer from ${DESKTOP_RECORDING_BYTES.min} to ${caps.max} (half the session's ${r.settings.memoryMb} MiB of memory${room}: the video is one of its files), got ${maxBytes}`, {
      details: { field: 'maxBytes', min: DESKTOP_RECORDING_BYTES.min, max: caps.max },
    });
  }
  return maxBytes;
}

export function desktopService(m: DesktopRecordingSteps): DesktopService {
  // Start and stop of one session never interleave (two starts would race for the next process name).
  const mutex = new KeyedMutex();

  /** The record, which must have a desktop; checked before waking the machine. */
  const desktopOf = async (p: Principal, sessionId: string): Promise<{ r: SessionRecord; screen: DesktopSettings }> => {
    const r = await m.session(p, sessionId);
    if (!r.settings.desktop) throw noDesktopError(sessionId);
    return { r, screen: r.settings.desktop };
  };

  const fileBytes = async (d: SandboxDriver, sandboxId: string, opts: CallOptions): Promise<number> => {
    try {
      return (await d.stat(sandboxId, DESKTOP_RECORDING_PATH, opts)).size;
    } catch (e) {
      if (e instanceof AppError && e.code === 'not_found') return 0;
      throw e;
    }
  };

  const status = async (d: SandboxDriver, sandboxId: string, opts: CallOptions): Promise<RecordingStatus> => {
    const rec = latest(await d.listProcesses(sandboxId, opts));
    return {
      recording: rec?.state === 'running',
      bytes: await fileBytes(d, sandboxId, opts),
      startedAt: rec?.startedAt ?? null,
      endedAt: rec?.endedAt ?? null,
      cap: rec ? capOf(rec) : null,
      execId: rec?.execId ?? null,
    };
  };

  /** The process's record now (undefined once the agent dropped it). */
  const processNow = async (d: SandboxDriver, sandboxId: string, execId: string, opts: CallOptions): Promise<ProcessInfo | undefined> =>
    (await d.listProcesses(sandboxId, opts)).find((x) => x.execId === execId);

  /** What ffmpeg said on stderr (it logs errors only), for a failure message. */
  const stderrOf = async (d: SandboxDriver, sandboxId: string, execId: string): Promise<string> => {
    let text = '';
    try {
      for await (const ev of await d.processOutput(sandboxId, execId, { follow: false })) if (ev.type === 'stderr') text += Buffer.from(ev.data).toString();
    } catch {
      // the message is a courtesy: the failure is reported either way
    }
    return text.trim().slice(-500);
  };

  /** Polls until the process has exited or ms passed; true when it exited. */
  const exited = async (d: SandboxDriver, sandboxId: string, execId: string, ms: number, opts: CallOptions): Promise<boolean> => {
    for (const until = Date.now() + ms; ; ) {
      const x = await processNow(d, sandboxId, execId, opts);
      if (!x || x.state === 'exited') return true;
      if (Date.now() >= until) return false;
      throwIfAborted(opts.signal);
      await sleep(POLL_MS);
    }
  };

  return {
    async info(p, sessionId, opts = {}) {
      const { screen } = await desktopOf(p, sessionId);
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      return { sessionId, screen: { ...screen }, recording: await status(d, sandboxId, opts) };
    },

    start(p, sessionId, opts = {}) {
      return mutex.run(sessionId, async () => {
        const { r, screen } = await desktopOf(p, sessionId);
        const cap = checkCap(opts.maxBytes, r);
        const { d, sandboxId } = await m.live(p, sessionId, opts);
        const prev = latest(await d.listProcesses(sandboxId, opts));
        if (prev?.state === 'running') {
          throw new AppError('conflict', `session ${sessionId} is already recording its desktop (since ${new Date(prev.startedAt).toISOString()}); stop it first`, {
            details: { reason: 'recording', execId: prev.execId },
          });
        }
        const execId = desktopRecordingExecId(prev ? (desktopRecordingSeq(prev.execId) as number) + 1 : 0);
        await d.mkdir(sandboxId, DESKTOP_RECORDING_DIR, { ...opts, parents: true });
        // A new recording replaces the previous video; removed first so `bytes` never shows the old one.
        await d.remove(sandboxId, DESKTOP_RECORDING_PATH, opts).catch((e: unknown) => {
          if (!(e instanceof AppError && e.code === 'not_found')) throw e;
        });
        const { pid } = await d.startProcess(sandboxId, execId, { argv: ffmpegArgv(screen, cap), stdin: false }, opts);
        await m.audit(p, r.tenantId, sessionId, 'session.desktop.record.start', { execId, pid, maxBytes: cap, fps: DESKTOP_RECORDING_FPS, screen: { ...screen } });
        // Resolves once the first frame is in the file, so a caller's screen changes right after are recorded.
        for (const until = Date.now() + START_WAIT_MS; Date.now() < until; await sleep(POLL_MS)) {
          throwIfAborted(opts.signal);
          const x = await processNow(d, sandboxId, execId, opts);
          if (x?.state === 'exited') throw new SandboxError(`the recording did not start: ffmpeg exited with ${x.exit?.code ?? '?'}: ${(await stderrOf(d, sandboxId, execId)) || 'no message'}`, { details: { execId } });
          if ((await fileBytes(d, sandboxId, opts)) > 0) break;
        }
        return status(d, sandboxId, opts);
      });
    },

    stop(p, sessionId, opts = {}) {
      return mutex.run(sessionId, async () => {
        const { r } = await desktopOf(p, sessionId);
        const { d, sandboxId } = await m.live(p, sessionId, opts);
        const rec = latest(await d.listProcesses(sandboxId, opts));
        if (rec?.state !== 'running') return { stopped: false, ...(await status(d, sandboxId, opts)) };
        // SIGTERM lets ffmpeg flush the frames its encoder holds; SIGKILL if it does not end (MPEG-TS loses
        // nothing already written either way).
        await d.killProcess(sandboxId, rec.execId, { ...opts, signalNumber: SIGTERM });
        if (!(await exited(d, sandboxId, rec.execId, TERM_GRACE_MS, opts))) {
          await d.killProcess(sandboxId, rec.execId, { ...opts, signalNumber: SIGKILL });
          if (!(await exited(d, sandboxId, rec.execId, KILL_WAIT_MS, opts))) throw new SandboxError(`the recording process ${rec.execId} did not end after SIGKILL`, { details: { execId: rec.execId } });
        }
        const after = await status(d, sandboxId, opts);
        await m.audit(p, r.tenantId, sessionId, 'session.desktop.record.stop', { execId: rec.execId, bytes: after.bytes });
        return { stopped: true, ...after };
      });
    },

    async read(p, sessionId, opts = {}) {
      await desktopOf(p, sessionId);
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      const size = await fileBytes(d, sandboxId, opts);
      // Whole packets only: a recording still running (or killed) may have written part of the last one.
      const whole = size - (size % MPEG_TS_PACKET_BYTES);
      if (whole === 0) throw new NotFoundError('recording', sessionId, { details: { reason: 'no_recording' } });
      const src = await d.readFile(sandboxId, DESKTOP_RECORDING_PATH, opts);
      return (async function* () {
        let left = whole;
        for await (const chunk of src) {
          const piece = chunk.byteLength > left ? chunk.subarray(0, left) : chunk;
          left -= piece.byteLength;
          m.meter(sessionId, { bytesOut: piece.byteLength });
          if (piece.byteLength > 0) yield piece;
          if (left === 0) return; // leaving the loop ends the driver's read
        }
      })();
    },
  };
}
