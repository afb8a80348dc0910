/**
 * HTTP upgrades on `/v1/sessions/:id/ports/:port/…` (issue 9 §3), which Hono never sees:
 * - `Upgrade: websocket` (any other protocol too): the request is passed to the app inside the session
 *   as it came (path prefix stripped, X-Forwarded-Prefix set, Authorization removed), and from then on the
 *   bytes flow both ways untouched: the app's own 101 answer, then its frames.
 * - `Upgrade: berth-tcp`: Berth answers 101 itself and the connection becomes a raw TCP tunnel to the
 *   port (what `berth port-forward` and the SDK's `ports.forward` use).
 * Authentication is the same bearer token as every /v1 route. Port links (`/p/<token>/…`, no bearer
 * token: the token in the path is the credential) pass every upgrade to the app, berth-tcp included, as
 * the proxy passes a WebSocket. Errors are answered as HTTP with the usual JSON error body, then the
 * connection is closed.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { AppError, NotFoundError, isAppError, isId } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { INTERNAL_MESSAGE, portLinkPrefix } from '../protocol/index.js';
import type { Logger } from './log.js';
import { forwardHeaders, portParam } from './routes/ports.js';
import { refuseUpgrade, type UpgradeHandler } from './serve.js';

export const TCP_UPGRADE = 'berth-tcp';
const PATH_RE = /^\/v1\/sessions\/([^/]+)\/ports\/([^/?]+)(\/[^?]*)?(\?.*)?$/;
const LINK_RE = /^\/p\/([^/?]+)(\/[^?]*)?(\?.*)?$/;

/**
 * Joins the client to `socket` (a connection to the port): raw, after Berth's own 101; otherwise the
 * upgrade request goes to the app with `prefix` stripped (path `rest`) and the app answers it.
 */
function join(req: IncomingMessage, client: Duplex, head: Buffer, socket: Duplex, o: { raw: boolean; prefix: string; rest: string }): void {
  socket.on('error', () => client.destroy());
  client.on('close', () => socket.destroy());
  if (o.raw) {
    client.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${TCP_UPGRADE}\r\nconnection: Upgrade\r\n\r\n`);
  } else {
    const headers = forwardHeaders(req.headers, { prefix: o.prefix, host: req.headers.host ?? 'localhost', proto: 'http' });
    headers.connection = 'Upgrade';
    headers.upgrade = req.headers.upgrade ?? '';
    const lines = [`${req.method ?? 'GET'} ${o.rest} HTTP/1.1`];
    for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
    socket.write(`${lines.join('\r\n')}\r\n\r\n`);
  }
  if (head.length) socket.write(head);
  client.pipe(socket);
  socket.pipe(client);
}

function take(client: Duplex, log: Logger | undefined, work: () => Promise<void>): true {
  client.on('error', () => undefined);
  void work().catch((e: unknown) => {
    const err = isAppError(e) ? e : new AppError('internal', INTERNAL_MESSAGE);
    if (!isAppError(e)) log?.error('port upgrade failed', { message: (e as Error).message });
    refuseUpgrade(client, err);
  });
  return true;
}

/** Answers an upgrade for a ports path (returns true), or leaves it to another handler (false). */
export function portUpgrade(engine: Engine, log?: Logger): UpgradeHandler {
  return (req, client, head) => {
    const m = PATH_RE.exec(req.url ?? '');
    if (!m) return false;
    return take(client, log, async () => {
      const [, id = '', rawPort, rest, query] = m;
      const auth = req.headers.authorization;
      const token = auth ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(auth)?.[1] : undefined;
      if (!token) throw new AppError('unauthenticated', 'missing bearer token (Authorization: Bearer <token>)');
      const p = await engine.authenticate(token);
      if (!isId('session', id)) throw new NotFoundError('session', id);
      const port = portParam(rawPort);
      const raw = (req.headers.upgrade ?? '').toLowerCase() === TCP_UPGRADE;
      const { socket } = await engine.ports.open(p, id, port, { via: raw ? 'forward' : 'proxy' });
      join(req, client, head, socket, { raw, prefix: `/v1/sessions/${id}/ports/${port}`, rest: `${rest || '/'}${query ?? ''}` });
    });
  };
}

/** Answers an upgrade for a port link path `/p/<token>/…` (returns true), or leaves it (false). */
export function portLinkUpgrade(engine: Engine, log?: Logger): UpgradeHandler {
  return (req, client, head) => {
    const m = LINK_RE.exec(req.url ?? '');
    if (!m) return false;
    return take(client, log, async () => {
      const [, token = '', rest, query] = m;
      const { socket } = await engine.portLinks.open(token);
      join(req, client, head, socket, { raw: false, prefix: portLinkPrefix(token), rest: `${rest || '/'}${query ?? ''}` });
    });
  };
}
