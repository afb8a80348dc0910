/** Middleware as named factories, composed once in app.ts. */
import { randomUUID } from 'node:crypto';
import type { ErrorHandler, MiddlewareHandler, NotFoundHandler } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { AppError, ID_PREFIX, isAppError, type ErrorCode, type IdKind, type Principal } from '../core/index.js';
import type { RequestFacts } from '../engine/request-audit.js';
import type { Engine } from '../engine/api.js';
import { INTERNAL_MESSAGE, httpStatus, toErrorBody } from '../protocol/index.js';
import type { Env } from './context.js';
import type { Logger } from './log.js';

const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,128}$/;

/** The path as logs show it: a port link's token is a credential, so `/p/<token>` becomes `/p/…`. */
export function loggedPath(path: string): string {
  return path.startsWith('/p/') ? path.replace(/^\/p\/[^/]*/, '/p/…') : path;
}

/** Gives every request an id (the caller's X-Request-Id when sane) and logs it at debug level. */
export function requestContext(log: Logger): MiddlewareHandler<Env> {
  return async function requestContext(c, next) {
    const given = c.req.header('x-request-id');
    const id = given && REQUEST_ID_RE.test(given) ? given : randomUUID();
    c.set('requestId', id);
    const t0 = performance.now();
    await next();
    c.header('x-request-id', id);
    log.debug('request', { requestId: id, method: c.req.method, path: loggedPath(c.req.path), status: c.res.status, ms: Math.round(performance.now() - t0) });
  };
}

/** `Authorization: Bearer <token>` → engine.authenticate → the principal on the context. */
export function bearerAuth(engine: Engine): MiddlewareHandler<Env> {
  return async function bearerAuth(c, next) {
    // Already authenticated by the console's cookie (console-auth.ts), which runs first.
    if (!c.get('principal')) c.set('principal', await bearerPrincipal(c, engine));
    await next();
  };
}

async function bearerPrincipal(c: Parameters<MiddlewareHandler<Env>>[0], engine: Engine): Promise<Principal> {
  const header = c.req.header('authorization');
  const m = header ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header) : null;
  if (!m?.[1]) {
    c.header('www-authenticate', 'Bearer');
    throw new AppError(
      'unauthenticated',
      header ? 'malformed Authorization header; expected "Bearer <token>"' : 'missing bearer token (Authorization: Bearer <token>)',
    );
  }
  return engine.authenticate(m[1]);
}

// ---- every request with its principal (issue 12 §2) ------------------------------------------------------

const KIND_OF_PREFIX = new Map<string, IdKind>(Object.entries(ID_PREFIX).map(([k, v]) => [v, k as IdKind]));
const ID_SEGMENT = /^([a-z]{3})_[0-9a-hjkmnp-tv-z]{20}$/;
/** Response types whose bodies are file contents: recorded when the body ends, with its size, never its bytes. */
const COUNTED_BODIES = new Set(['application/octet-stream', 'application/x-tar']);

/** The path with ids replaced by `:kind`, and the ids (plus a file path or session filter) as the target. */
export function routeAndTarget(path: string, query: Record<string, string>): { route: string; target: Record<string, string> } {
  const target: Record<string, string> = {};
  const route = path
    .split('/')
    .map((seg) => {
      const m = ID_SEGMENT.exec(seg);
      const kind = m ? KIND_OF_PREFIX.get(m[1] as string) : undefined;
      if (!kind) return seg.length > 128 ? `${seg.slice(0, 128)}…` : seg;
      target[kind] ??= seg;
      return `:${kind}`;
    })
    .join('/');
  if (typeof query.path === 'string') target.path = query.path.slice(0, 4096);
  if (typeof query.sessionId === 'string' && target.session === undefined) target.session = query.sessionId.slice(0, 64);
  return { route, target };
}

function contentLength(h: Headers): number | undefined {
  const v = h.get('content-length');
  const n = v === null ? NaN : Number(v);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * Authenticates every /v1 request and hands it to the engine's request audit (engine/request-audit.ts):
 * the one place that records who asked for what, allowed or refused, and rate-limits refusals while a
 * breaker is open. Replaces bearerAuth on /v1.
 */
export function requestAudit(engine: Engine): MiddlewareHandler<Env> {
  return async function requestAudit(c, next) {
    const { route, target } = routeAndTarget(c.req.path, c.req.query());
    const bytesIn = contentLength(c.req.raw.headers);
    const base = (p: Principal | null): Omit<RequestFacts, 'status'> => ({
      principal: p,
      method: c.req.method,
      route,
      target,
      requestId: c.get('requestId'),
      ...(bytesIn !== undefined && bytesIn > 0 ? { bytesIn } : {}),
    });
    await engine.requests.handle({
      authenticate: async () => {
        // The console's cookie (console-auth.ts, which runs first) may have authenticated it already.
        const p = c.get('principal') ?? (await bearerPrincipal(c, engine));
        c.set('principal', p);
        return p;
      },
      next,
      facts: (p, err) => {
        if (err !== undefined) {
          const code = isAppError(err) ? err.code : 'internal';
          return { ...base(p), status: httpStatus(code), code };
        }
        const status = c.res.status;
        const e = c.error;
        const code = status >= 400 ? (isAppError(e) ? e.code : e instanceof HTTPException ? codeForHttpException(e.status) : codeForHttpException(status)) : undefined;
        const replay = c.get('idempotency');
        const facts: RequestFacts = { ...base(p), status, ...(code ? { code } : {}), ...(replay ? { idempotency: replay } : {}) };
        const length = contentLength(c.res.headers);
        if (length !== undefined) return { ...facts, bytesOut: length };
        const type = (c.res.headers.get('content-type') ?? '').split(';')[0]?.trim() ?? '';
        if (status >= 400 || !c.res.body || !COUNTED_BODIES.has(type)) return facts;
        // Count the body as it goes out; the entry is written when it ends (or the client goes away).
        let n = 0;
        let settle!: (f: RequestFacts) => void;
        const done = new Promise<RequestFacts>((resolve) => (settle = resolve));
        const counter = new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, ctl) {
            n += chunk.byteLength;
            ctl.enqueue(chunk);
          },
          flush() {
            settle({ ...facts, bytesOut: n });
          },
        });
        const body = c.res.body.pipeThrough(counter);
        void done; // settled by flush, or by the abort below
        c.req.raw.signal.addEventListener('abort', () => settle({ ...facts, bytesOut: n, code: 'cancelled' }), { once: true });
        c.res = new Response(body, { status, headers: c.res.headers });
        return done;
      },
    });
  };
}

function codeForHttpException(status: number): ErrorCode {
  if (status === 401) return 'unauthenticated';
  if (status === 403) return 'forbidden';
  if (status === 404) return 'not_found';
  if (status === 413) return 'payload_too_large';
  return status < 500 ? 'invalid_argument' : 'internal';
}

/**
 * The one error mapping: AppError → its status and wire body; anything else → 500 `internal` with a
 * generic message. Stacks only ever go to the log.
 */
export function errorHandler(log: Logger): ErrorHandler<Env> {
  return function errorHandler(err, c) {
    let e: unknown = err;
    if (err instanceof HTTPException && !isAppError(err)) e = new AppError(codeForHttpException(err.status), err.message || 'bad request');
    const requestId = c.get('requestId');
    if (isAppError(e)) {
      const status = httpStatus(e.code);
      if (status >= 500) {
        // internal/config are our bugs (stack wanted); sandbox_failed/unavailable/timeout are operational.
        const fields = { requestId, method: c.req.method, path: loggedPath(c.req.path), code: e.code, message: e.message };
        if (status === 500) log.error('request failed', { ...fields, stack: e.stack });
        else log.warn('request failed', fields);
      }
      return c.json(toErrorBody(e), status as ContentfulStatusCode);
    }
    log.error('unhandled error', {
      requestId,
      method: c.req.method,
      path: loggedPath(c.req.path),
      message: err instanceof Error ? err.message : String(err),
      stack: err instanceof Error ? err.stack : undefined,
    });
    return c.json({ error: { code: 'internal', message: INTERNAL_MESSAGE, details: { requestId } } }, 500);
  };
}

export function notFound(): NotFoundHandler<Env> {
  return function notFound(c) {
    const err = new AppError('not_found', `no route for ${c.req.method} ${c.req.path}`, { details: { method: c.req.method, path: c.req.path } });
    return c.json(toErrorBody(err), 404);
  };
}
