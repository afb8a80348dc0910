/**
 * A desktop's live view (issue 11): the WebSocket a VNC client (noVNC in the console) speaks RFB over, to
 * watch, and with the session's control lease act on, the desktop of a session created with `desktop`. Its
 * URL carries a single-use ticket (60 s) from POST …/desktop/tickets, so it works where a WebSocket cannot
 * send an Authorization header (browsers); it is spent on first use and worth nothing in a log afterwards.
 */
import type { DesktopTicketView } from '../protocol/vnc.js';
import { VNC_SUBPROTOCOL, desktopViewPaths } from '../protocol/vnc-names.js';
import type { Transport } from './http.js';

export class SessionDesktopView {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  /** A ws:// (or wss://) URL to the desktop's VNC bridge with a fresh ticket. invalid_state (no_desktop) without a desktop. */
  async url(opts: { signal?: AbortSignal } = {}): Promise<string> {
    const paths = desktopViewPaths(this.sessionId);
    const { ticket } = await this.t.json<DesktopTicketView>('POST', paths.tickets, { root: true, signal: opts.signal });
    return this.t.url(paths.vnc, { ticket }, true).replace(/^http/, 'ws');
  }

  /**
   * Opens the live view: a WebSocket (the global one: browsers, Node 22+) to url(), still connecting, binary
   * frames as ArrayBuffers, for a VNC client that takes a socket as it is (noVNC's RFB does). Refusals
   * (no_desktop, not found) come from the ticket request, as AppErrors.
   */
  async open(opts: { signal?: AbortSignal } = {}): Promise<WebSocket> {
    const ws = new WebSocket(await this.url(opts), [VNC_SUBPROTOCOL]);
    ws.binaryType = 'arraybuffer';
    return ws;
  }
}
