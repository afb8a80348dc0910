/**
 * A session's desktop (issue 11): its screen, and a recording of it for review. The video (MPEG-TS, H.264,
 * 5 fps) is kept inside the session's machine: one per session, replaced by the next recording, capped
 * (default: the smaller of 256 MiB and a quarter of the session's memory), and removed with the session.
 * Every call on a session created without a desktop fails with invalid_state (details.reason no_desktop).
 */
import type { DesktopRecordingStopView, DesktopRecordingView, DesktopView, RecordingStartBody } from '../protocol/desktop.js';
import { desktopRecordingPaths } from '../protocol/desktop-names.js';
import type { Transport } from './http.js';

export interface RecordOptions {
  /** The video's size cap, bytes (ffmpeg stops there by itself). Default: see above; at most half the session's memory and half its file room (diskMb). */
  maxBytes?: number;
  signal?: AbortSignal;
}

export class SessionDesktop {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  private get paths() {
    return desktopRecordingPaths(this.sessionId);
  }

  /** The screen and the recording's state. */
  info(opts: { signal?: AbortSignal } = {}): Promise<DesktopView> {
    return this.t.json<DesktopView>('GET', this.paths.desktop, { signal: opts.signal });
  }

  /** Starts recording (replacing an earlier video); resolves once the first frame is written. conflict while one records. */
  record(opts: RecordOptions = {}): Promise<DesktopRecordingView> {
    const body: RecordingStartBody = opts.maxBytes === undefined ? {} : { maxBytes: opts.maxBytes };
    return this.t.json<DesktopRecordingView>('POST', this.paths.start, { json: body, signal: opts.signal, deadline: false });
  }

  /** Stops recording (the video stays); `stopped` false when nothing was recording. */
  stopRecording(opts: { signal?: AbortSignal } = {}): Promise<DesktopRecordingStopView> {
    return this.t.json<DesktopRecordingStopView>('POST', this.paths.stop, { json: {}, signal: opts.signal, deadline: false });
  }

  /** The video so far (MPEG-TS) as it arrives; not_found when nothing was recorded. Errors surface on iteration. */
  recordingStream(opts: { signal?: AbortSignal } = {}): AsyncIterable<Uint8Array> {
    const t = this.t;
    const path = this.paths.recording;
    return {
      async *[Symbol.asyncIterator]() {
        const { res, signal } = await t.send('GET', path, { signal: opts.signal, deadline: false });
        if (!res.body) return;
        try {
          for await (const chunk of res.body) yield chunk;
        } catch (e) {
          throw t.failure(e, signal, 'read the desktop recording');
        }
      },
    };
  }

  /** The video so far (MPEG-TS), whole. */
  async recording(opts: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    let n = 0;
    for await (const c of this.recordingStream(opts)) {
      parts.push(c);
      n += c.byteLength;
    }
    const out = new Uint8Array(n);
    let at = 0;
    for (const c of parts) {
      out.set(c, at);
      at += c.byteLength;
    }
    return out;
  }
}
