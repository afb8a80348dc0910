/**
 * Wire types of a session's desktop (issue 11) and its recording: `GET /v1/sessions/:id/desktop`, `POST
 * …/desktop/recording/start` and `/stop`, and `GET …/desktop/recording` (the video, MPEG-TS). The video is
 * kept inside the session's machine: it goes with the session, and a new recording replaces it.
 */
import * as z from 'zod';
import { DESKTOP_RECORDING_BYTES, DESKTOP_RECORDING_FPS } from '../core/desktop.js';
import { iso } from './views.js';

export { MPEG_TS, desktopRecordingPaths } from './desktop-names.js';

export interface DesktopRecordingView {
  /** ffmpeg is writing the video now. */
  recording: boolean;
  /** Size of the video so far, bytes (0: none). */
  bytes: number;
  /** The latest recording's start and end, ISO 8601 (the sandbox's clock); null: none, or still running. */
  startedAt: string | null;
  endedAt: string | null;
  /** Its size cap, bytes (it stops by itself there); null when none was started. */
  cap: number | null;
  /** Its background process (`berth ps` lists it); null when none was started. */
  execId: string | null;
  /** Frames per second. */
  fps: number;
}

export interface DesktopView {
  sessionId: string;
  screen: { width: number; height: number };
  recording: DesktopRecordingView;
}

export interface DesktopRecordingStopView extends DesktopRecordingView {
  /** false when nothing was recording (the answer is then just the state). */
  stopped: boolean;
}

/** The engine's status (times in ms) as the wire shows it. */
export function toDesktopRecordingView(s: { recording: boolean; bytes: number; startedAt: number | null; endedAt: number | null; cap: number | null; execId: string | null }): DesktopRecordingView {
  return {
    recording: s.recording,
    bytes: s.bytes,
    startedAt: s.startedAt === null ? null : iso(s.startedAt),
    endedAt: s.endedAt === null ? null : iso(s.endedAt),
    cap: s.cap,
    execId: s.execId,
    fps: DESKTOP_RECORDING_FPS,
  };
}

export const RecordingStartBodySchema = z.strictObject({
  maxBytes: z
    .number()
    .int()
    .min(DESKTOP_RECORDING_BYTES.min)
    .max(DESKTOP_RECORDING_BYTES.max)
    .optional()
    .describe(`the video's size cap in bytes; default the smaller of ${DESKTOP_RECORDING_BYTES.default} (256 MiB) and a quarter of the session's memory, at most half of it (the machine keeps its files in memory)`),
});
export type RecordingStartBody = z.infer<typeof RecordingStartBodySchema>;

export const DesktopRecordingViewSchema = z.strictObject({
  recording: z.boolean(),
  bytes: z.number().int().min(0),
  startedAt: z.string().nullable().describe('ISO-8601 time'),
  endedAt: z.string().nullable().describe('ISO-8601 time'),
  cap: z.number().int().nullable(),
  execId: z.string().nullable(),
  fps: z.number().int(),
});

export const DesktopViewSchema = z.strictObject({
  sessionId: z.string(),
  screen: z.strictObject({ width: z.number().int(), height: z.number().int() }),
  recording: DesktopRecordingViewSchema,
});

export const DesktopRecordingStopViewSchema = DesktopRecordingViewSchema.extend({ stopped: z.boolean() });
