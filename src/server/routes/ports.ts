/**
 * Ports (issue 9 §3): an authenticated HTTP proxy to a server listening on loopback inside a session, at
 * `/v1/sessions/:id/ports/:port/…`. The prefix is stripped and sent as `X-Forwarded-Prefix`, so an app can
 * build its own links; the caller's Authorization header never reaches the app. WebSocket (and the raw
 * TCP tunnel of `berth port-forward`) arrive as HTTP upgrades, handled in server/ports-upgrade.ts.
 */
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { Hono } from 'hono';
import { AppError, InvalidArgumentError } from '../../core/index.js';
import { callOpts, idParam, principal, type Ctx, type Env, type RouteDeps } from '../context.js';

/** Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus our own credential. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'authorization', 'host', 'content-length']);
const NULL_BODY = new Set([101, 204, 205, 304]);

/** The port path parameter: 1-65535, else 400 naming it. */
export function portParam(raw: string | undefined): number {
  const port = raw !== undefined && /^\d{1,5}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`port: must be an integer from 1 to 65535, got ${JSON.stringify(raw ?? '')}`, { details: { field: 'port', port: raw ?? null } });
  }
  return port;
}

/** The request headers for the app: hop-by-hop ones and Authorization removed, X-Forwarded-* added. */
export function forwardHeaders(h: IncomingHttpHeaders | Headers, o: { prefix: string; host: string; proto: string }): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const entries: Array<[string, string | string[] | undefined]> = h instanceof Headers ? [...h.entries()] : Object.entries(h);
  for (const [k, v] of entries) if (v !== undefined && !HOP.has(k.toLowerCase())) out[k.toLowerCase()] = v;
  out.host = o.host;
  out['x-forwarded-prefix'] = o.prefix;
  out['x-forwarded-host'] = o.host;
  out['x-forwarded-proto'] = o.proto;
  return out;
}

/**
 * Sends the request to the app over `socket` (a fresh connection to the port) with `prefix` stripped from
 * the path and sent as X-Forwarded-Prefix, and answers with the app's response. Shared by the bearer
 * proxy below and port links (routes/port-links.ts).
 */
export async function proxyRequest(c: Ctx, o: { socket: Duplex; prefix: string; port: number }): Promise<Response> {
  const { socket, prefix, port } = o;
  const url = new URL(c.req.url);
  const path = (url.pathname.slice(prefix.length) || '/') + url.search;
  const headers = forwardHeaders(c.req.raw.headers, { prefix, host: url.host, proto: url.protocol.replace(':', '') });
  headers.connection = 'close'; // one connection into the sandbox per request
  const body = c.req.raw.body;
  if (!body) headers['content-length'] = '0';
  else if (c.req.header('content-length')) headers['content-length'] = c.req.header('content-length')!;
  const req = httpRequest({ createConnection: () => socket as never, method: c.req.method, path, headers });
  const answered = new Promise<IncomingMessage>((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', reject);
  });
  if (body) Readable.fromWeb(body as never).on('error', () => req.destroy()).pipe(req);
  else req.end();
  let res: IncomingMessage;
  try {
    res = await answered;
  } catch (e) {
    socket.destroy();
    throw new AppError('port_closed', `port ${port}: the server inside the session closed the connection without an HTTP answer (${(e as Error).message})`, {
      details: { port },
    });
  }
  const out = new Headers();
  for (const [k, v] of Object.entries(res.headers)) {
    if (v === undefined || HOP.has(k) || k === 'content-length') continue;
    for (const one of Array.isArray(v) ? v : [v]) out.append(k, one);
  }
  if (res.headers['content-length'] && !res.headers['transfer-encoding']) out.set('content-length', res.headers['content-length']);
  res.once('close', () => socket.destroy());
  const status = res.statusCode ?? 502;
  if (NULL_BODY.has(status) || c.req.method === 'HEAD') {
    res.resume();
    return new Response(null, { status, headers: out });
  }
  return new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, { status, headers: out });
}

export function portRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();
  const proxy = async (c: Ctx): Promise<Response> => {
    const id = idParam(c, 'session');
    const port = portParam(c.req.param('port'));
    const { socket } = await engine.ports.open(principal(c), id, port, { ...callOpts(c), via: 'proxy' });
    return proxyRequest(c, { socket, prefix: `/v1/sessions/${id}/ports/${port}`, port });
  };
  r.all('/sessions/:id/ports/:port', proxy);
  r.all('/sessions/:id/ports/:port/*', proxy);
  return r;
}
