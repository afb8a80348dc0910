/**
 * Names of a desktop's live view the SDK and the console share with the server (no zod here: the console
 * bundle imports it through the SDK). The wire types and schema are in vnc.ts.
 */

/** The WebSocket subprotocol the bridge answers when asked (noVNC's historical one); frames are binary either way. */
export const VNC_SUBPROTOCOL = 'binary';

/** A session's desktop-view paths: the WebSocket bridge and where its tickets come from. */
export function desktopViewPaths(sessionId: string): { vnc: string; tickets: string } {
  const base = `/v1/sessions/${encodeURIComponent(sessionId)}/desktop`;
  return { vnc: `${base}/vnc`, tickets: `${base}/tickets` };
}

/** WebSocket close codes the bridge uses (besides 1000 when the VNC server ends the connection). */
export const VNC_CLOSE = Object.freeze({
  /** The client's RFB stream could not be read (the reason says why): RFC 6455 protocol error. */
  protocol: 1002,
  /** A text frame: RFB is binary. */
  text: 1003,
  /** The connection to the VNC server failed. */
  upstream: 1011,
});
