/** Binds the app to a TCP port with @hono/node-server; keep-alive on, graceful close. */
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import type { Duplex } from 'node:stream';
import { AppError, ConfigError, NotFoundError, UnavailableError, type ErrorCode } from '../core/index.js';
import { httpStatus, toErrorBody } from '../protocol/index.js';
import { silentLogger, type Logger } from './log.js';

export interface StartServerOptions {
  /** Anything with a fetch handler; normally createApp(...). */
  app: { fetch: (request: Request, ...rest: never[]) => Response | Promise<Response> };
  /** Interface to bind. Default '127.0.0.1'. */
  host?: string;
  /** TCP port; 0 picks a free one (see the returned url). Default 7070. */
  port?: number;
  /** Aborting it closes the server gracefully. */
  signal?: AbortSignal;
  /** How long close() waits for in-flight requests before cutting connections, ms. Default 10000. */
  graceMs?: number;
  log?: Logger;
  /**
   * Handlers of HTTP upgrades (WebSocket, the port tunnel), tried in order (server/upgrades.ts). May be set
   * later (`upgrades.handlers`): while null, an upgrade is answered 503 (the server is starting). One no
   * handler takes is answered 404. Default: none.
   */
  upgrades?: { handlers: readonly UpgradeHandler[] | null };
}

/** Takes an HTTP upgrade it recognises (returns true), or leaves it to the next handler (false). */
export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => boolean;

/** Answers an upgrade request with the usual JSON error body, then closes the connection. */
export function refuseUpgrade(socket: Duplex, err: AppError): void {
  const status = httpStatus(err.code);
  const body = JSON.stringify(toErrorBody(err));
  if (!socket.writable) return void socket.destroy();
  socket.end(`HTTP/1.1 ${status} ${status < 500 ? 'Client Error' : 'Server Error'}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

export interface RunningServer {
  /** e.g. http://127.0.0.1:7070 */
  url: string;
  port: number;
  /** Stops accepting, lets in-flight requests finish (up to graceMs), then closes every connection. */
  close(): Promise<void>;
}

/**
 * Keep-alive idle timeout, ms: longer than undici's client default (4 s) so a client never reuses a socket
 * the server is about to drop.
 */
const KEEP_ALIVE_MS = 65_000;

export async function startServer(opts: StartServerOptions): Promise<RunningServer> {
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 7070;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`port: must be an integer 0..65535, got ${port}`);
  const graceMs = opts.graceMs ?? 10_000;
  const log = opts.log ?? silentLogger;

  const server = createAdaptorServer({
    fetch: opts.app.fetch as (r: Request) => Response | Promise<Response>,
    hostname: host,
    serverOptions: {
      keepAlive: true,
      keepAliveTimeout: KEEP_ALIVE_MS,
      headersTimeout: KEEP_ALIVE_MS + 1_000,
      // Uploads (100 MB files, long stdin streams) and exec streams may run for hours: no whole-request limit.
      requestTimeout: 0,
    },
  }) as Server;

  await new Promise<void>((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => {
      reject(new UnavailableError(`cannot listen on ${host}:${port}: ${e.code === 'EADDRINUSE' ? 'address in use' : e.message}`, { cause: e }));
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (e) => log.error('server error', { message: e.message }));
  server.on('clientError', (e: NodeJS.ErrnoException, socket: Duplex) => answerClientError(e, socket, log));
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => undefined);
    const handlers = opts.upgrades ? opts.upgrades.handlers : [];
    if (handlers === null) return refuseUpgrade(socket, new UnavailableError('the server is starting'));
    if (!handlers.some((h) => h(req, socket, head))) refuseUpgrade(socket, new NotFoundError('route', `upgrade ${(req.url ?? '/').split('?')[0]}`));
  });

  const bound = (server.address() as AddressInfo).port;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${bound}`;

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        log.warn('closing connections still open after the grace period', { graceMs });
        server.closeAllConnections();
      }, graceMs);
      force.unref();
      server.close(() => {
        clearTimeout(force);
        resolve();
      });
      server.closeIdleConnections();
    });
    return closing;
  };
  if (opts.signal) {
    if (opts.signal.aborted) await close();
    else opts.signal.addEventListener('abort', () => void close(), { once: true });
  }
  return { url, port: bound, close };
}

/** What Node's HTTP parser rejects, as a status, a code and words a client can act on. */
function parserRejection(e: NodeJS.ErrnoException): { status: number; reason: string; code: ErrorCode; message: string } {
  switch (e.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, reason: 'Request Header Fields Too Large', code: 'payload_too_large', message: 'request headers are too large (limit 16 KiB)' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
    case 'ERR_HTTP_HEADERS_TIMEOUT':
      return { status: 408, reason: 'Request Timeout', code: 'timeout', message: 'the request was not received in time' };
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
      return { status: 400, reason: 'Bad Request', code: 'invalid_argument', message: 'malformed HTTP request: more than one Content-Length, or Content-Length with Transfer-Encoding' };
    default:
      return { status: 400, reason: 'Bad Request', code: 'invalid_argument', message: `malformed HTTP request: ${(e as { reason?: string }).reason ?? e.message}` };
  }
}

/**
 * Requests Node's parser rejects never reach the app: answer them here with the same error body as any
 * other error (Node's default is an empty 400), then close the connection, as the parser cannot go on.
 */
function answerClientError(e: NodeJS.ErrnoException, socket: Duplex, log: Logger): void {
  if (e.code === 'ECONNRESET' || !socket.writable) {
    log.info('client went away', { code: e.code ?? 'unknown' });
    socket.destroy();
    return;
  }
  const r = parserRejection(e);
  log.info('malformed request rejected', { status: r.status, code: e.code ?? 'unknown' });
  const body = JSON.stringify(toErrorBody(new AppError(r.code, r.message, { details: { parserCode: e.code ?? null } })));
  socket.end(
    `HTTP/1.1 ${r.status} ${r.reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
