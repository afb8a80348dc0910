/**
 * Desktops (issue 11): a session created with `desktop` also runs a virtual X display, a window manager and
 * a VNC server inside its machine. The names and limits here are the one statement of them; the engine,
 * the drivers (which image variant a spec boots) and the protocol derive theirs from this file.
 */

/** What a session's machine boots from: the base image, or the desktop variant built beside it. */
export type ImageVariant = 'base' | 'desktop';

export interface DesktopSettings {
  /** Screen width, pixels. */
  width: number;
  /** Screen height, pixels. */
  height: number;
}

/** The default screen (`--screen 1280x800`). */
export const DEFAULT_SCREEN: Readonly<DesktopSettings> = Object.freeze({ width: 1280, height: 800 });

/** Smallest and largest screen side, pixels. */
export const SCREEN_LIMITS = Object.freeze({ min: 320, maxWidth: 3840, maxHeight: 2160 });

/** The X display inside the machine (DISPLAY for every process the agent starts in a desktop session). */
export const DESKTOP_DISPLAY = ':0';

/** The VNC server's port on the sandbox's loopback (x11vnc, no password: only Berth reaches it). */
export const DESKTOP_VNC_PORT = 5900;

/** Screenshots are scaled to at most this width (computer-use agents work in that space). */
export const SCREENSHOT_MAX_WIDTH = 1280;

/** The background process (engine execId; `berth ps` lists it) that runs the display, the window manager and the VNC server. */
export const DESKTOP_EXEC_ID = 'exe_desk0000000000000000';

/**
 * Desktop recordings (engine/desktop-recording.ts): ffmpeg, a background process like the desktop's, grabs
 * the display into MPEG-TS (playable when cut at any point: no trailer, so a kill loses nothing written).
 * Each recording is a process named DESKTOP_RECORDING_EXEC_PREFIX + a 17-digit sequence number, the first
 * `exe_rec00000000000000000`: the sandbox's agent never reuses a process name, even once it has ended, so
 * the next recording takes the next number. A new recording replaces the previous video.
 */
export const DESKTOP_RECORDING_EXEC_PREFIX = 'exe_rec';

/** The execId of the n-th recording of a machine (n from 0). */
export function desktopRecordingExecId(n: number): string {
  return `${DESKTOP_RECORDING_EXEC_PREFIX}${String(n).padStart(17, '0')}`;
}

/** Its sequence number, or undefined when execId is not a recording's. */
export function desktopRecordingSeq(execId: string): number | undefined {
  const m = /^exe_rec(\d{17})$/.exec(execId);
  return m ? Number(m[1]) : undefined;
}

/** Where the video is written inside the machine (so it goes with the machine: hibernate, fork, terminate). */
export const DESKTOP_RECORDING_DIR = '/var/lib/berth-desktop';
export const DESKTOP_RECORDING_PATH = `${DESKTOP_RECORDING_DIR}/recording.ts`;

/** Frames grabbed per second. */
export const DESKTOP_RECORDING_FPS = 5;

/**
 * The video's size cap, bytes (ffmpeg's -fs: it stops there by itself). The machine's files live in its
 * memory (gVisor's overlay), so the default is the smaller of 256 MiB and a quarter of the session's
 * memory, and a cap above half of it is refused.
 */
export const DESKTOP_RECORDING_BYTES = Object.freeze({ default: 256 * 1024 * 1024, min: 1024 * 1024, max: 4 * 1024 * 1024 * 1024 });

/** An MPEG-TS packet: 188 bytes, the first 0x47. The recording is read out in whole packets. */
export const MPEG_TS_PACKET_BYTES = 188;
