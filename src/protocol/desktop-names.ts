/**
 * Names of a desktop's recording the SDK shares with the server (no zod here: the console bundle imports
 * it through the SDK). The wire types and schemas are in desktop.ts.
 */

/** The recording's media type: an MPEG transport stream (plays when cut at any point). */
export const MPEG_TS = 'video/mp2t';

/** A session's desktop paths, under /v1. */
export function desktopRecordingPaths(sessionId: string): { desktop: string; recording: string; start: string; stop: string } {
  const desktop = `/sessions/${encodeURIComponent(sessionId)}/desktop`;
  return { desktop, recording: `${desktop}/recording`, start: `${desktop}/recording/start`, stop: `${desktop}/recording/stop` };
}
