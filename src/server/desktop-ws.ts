/**
 * The desktop's live view (issue 11): `GET /v1/sessions/:id/desktop/vnc` with `Upgrade: websocket` joins
 * the client (noVNC in the console) to the VNC server inside the session. Binary frames carry RFB; the
 * client's half passes through the RFB filter (rfb-filter.ts), which drops input unless the engine says
 * this viewer may act (engine/vnc.ts: the holder of the session's control lease), and ends the connection on
 * anything it cannot read. The server's half is passed on as it comes. The `binary` subprotocol is
 * answered when asked.
 *
 * Errors before the upgrade are ordinary HTTP error responses (401, 404, 409 invalid_state no_desktop…);
 * after it, a close frame whose reason says what went wrong (VNC_CLOSE).
 */
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { AppError, InvalidArgumentError, NotFoundError, isAppError, isId } from '../core/index.js';
import type { Engine, VncConnection } from '../engine/api.js';
import { INTERNAL_MESSAGE, VNC_CLOSE, VNC_SUBPROTOCOL } from '../protocol/index.js';
import type { Logger } from './log.js';
import { RfbClientFilter, RfbProtocolError } from './rfb-filter.js';
import { refuseUpgrade, type UpgradeHandler } from './serve.js';
import { upgradeCaller } from './ws-auth.js';

const PATH_RE = /^\/v1\/sessions\/([^/]+)\/desktop\/vnc\/?$/;

/** Bytes one frame from the client may carry (a clipboard paste at the filter's limit, and then some). */
const MAX_FRAME = 2 << 20;
/** Screen updates queued for a slow client above this stop reading the VNC server until below LOW_WATER, bytes. */
const HIGH_WATER = 4 << 20;
const LOW_WATER = 1 << 20;

export function desktopUpgrade(o: { engine: Engine; log: Logger }): UpgradeHandler {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_FRAME,
    handleProtocols: (protocols) => (protocols.has(VNC_SUBPROTOCOL) ? VNC_SUBPROTOCOL : false),
  });
  return (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = PATH_RE.exec(url.pathname);
    if (!m) return false;
    void (async () => {
      const sessionId = decodeURIComponent(m[1]!);
      if (!isId('session', sessionId)) throw new NotFoundError('session', sessionId);
      if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') throw new InvalidArgumentError('the desktop view is a WebSocket (Upgrade: websocket)');
      const { principal, via } = await upgradeCaller(o.engine, req, {
        ticket: url.searchParams.get('ticket') ?? undefined,
        redeem: (t) => o.engine.vnc.redeem(t, sessionId),
        ticketRoute: 'POST /v1/sessions/:id/desktop/tickets',
      });
      const conn = await o.engine.vnc.connect(principal, sessionId, { via });
      conn.socket.pause(); // what the VNC server says first waits for the bridge
      if (socket.destroyed) return void conn.socket.destroy();
      let upgraded = false;
      socket.once('close', () => upgraded || conn.socket.destroy()); // a handshake ws refused
      wss.handleUpgrade(req, socket, head, (ws) => {
        upgraded = true;
        bridge(ws, conn, { sessionId, log: o.log });
      });
    })().catch((e: unknown) => refuse(socket, e, o.log));
    return true;
  };
}

function refuse(socket: Duplex, e: unknown, log: Logger): void {
  const err = isAppError(e) ? e : new AppError('internal', INTERNAL_MESSAGE);
  if (!isAppError(e)) log.error('desktop upgrade failed', { message: (e as Error).message });
  refuseUpgrade(socket, err);
}

/** A close reason fits in 123 bytes (RFC 6455). */
function reason(s: string): string {
  return Buffer.byteLength(s) <= 123 ? s : `${Buffer.from(s).subarray(0, 120).toString('utf8').replace(/\uFFFD$/, '')}…`;
}

/** Frames ↔ bytes, the client's through the filter, with backpressure both ways. */
function bridge(ws: WebSocket, conn: VncConnection, o: { sessionId: string; log: Logger }): void {
  const tcp = conn.socket;
  const filter = new RfbClientFilter({ mayInput: conn.mayInput });
  const close = (code: number, why: string) => {
    if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close(code, reason(why));
    tcp.destroy();
  };

  const drained = () => {
    if (tcp.isPaused() && ws.bufferedAmount < LOW_WATER && ws.readyState === ws.OPEN) tcp.resume();
  };
  tcp.on('data', (chunk: Buffer) => {
    ws.send(chunk, { binary: true }, drained);
    if (ws.bufferedAmount > HIGH_WATER) tcp.pause();
  });
  tcp.on('end', () => close(1000, 'the desktop closed the connection'));
  tcp.on('error', (e: Error) => close(VNC_CLOSE.upstream, `the desktop connection failed: ${e.message}`));
  tcp.on('close', () => close(1000, 'the desktop closed the connection'));

  ws.on('message', (data: RawData, binary: boolean) => {
    if (!binary) return close(VNC_CLOSE.text, 'RFB frames are binary');
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    let out: Buffer;
    try {
      out = filter.push(bytes);
    } catch (e) {
      const msg = e instanceof RfbProtocolError ? e.message : 'rfb: the client stream could not be read';
      o.log.info('desktop view closed: unreadable client stream', { sessionId: o.sessionId, connectionId: conn.connectionId, message: msg });
      return close(VNC_CLOSE.protocol, msg);
    }
    if (out.length && !tcp.write(out)) {
      ws.pause();
      tcp.once('drain', () => ws.resume());
    }
  });
  ws.on('close', () => {
    tcp.destroy();
    if (filter.dropped) o.log.info('desktop view: input dropped (viewer without control)', { sessionId: o.sessionId, connectionId: conn.connectionId, dropped: filter.dropped });
  });
  ws.on('error', () => tcp.destroy());
  tcp.resume();
}
