/** Middleware as named factories, composed once in app.ts. */
import { randomUUID } from 'node:crypto';
import type { ErrorHandler, MiddlewareHandler, NotFoundHandler } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { AppError, isAppError, type ErrorCode } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { INTERNAL_MESSAGE, httpStatus, toErrorBody } from '../protocol/index.js';
import type { Env } from './context.js';
import type { Logger } from './log.js';

const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,128}$/;

/** Gives every request an id (the caller's X-Request-Id when sane) and logs it at debug level. */
export function requestContext(log: Logger): MiddlewareHandler<Env> {
  return async function requestContext(c, next) {
    const given = c.req.header('x-request-id');
    const id = given && REQUEST_ID_RE.test(given) ? given : randomUUID();
    c.set('requestId', id);
    const t0 = performance.now();
    await next();
    c.header('x-request-id', id);
    log.debug('request', { requestId: id, method: c.req.method, path: c.req.path, status: c.res.status, ms: Math.round(performance.now() - t0) });
  };
}

/** `Authorization: Bearer <token>` → engine.authenticate → the principal on the context. */
export function bearerAuth(engine: Engine): MiddlewareHandler<Env> {
  return async function bearerAuth(c, next) {
    const header = c.req.header('authorization');
    const m = header ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header) : null;
    if (!m?.[1]) {
      c.header('www-authenticate', 'Bearer');
      throw new AppError(
        'unauthenticated',
        header ? 'malformed Authorization header; expected "Bearer <token>"' : 'missing bearer token (Authorization: Bearer <token>)',
      );
    }
    c.set('principal', await engine.authenticate(m[1]));
    await next();
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
        const fields = { requestId, method: c.req.method, path: c.req.path, code: e.code, message: e.message };
        if (status === 500) log.error('request failed', { ...fields, stack: e.stack });
        else log.warn('request failed', fields);
      }
      return c.json(toErrorBody(e), status as ContentfulStatusCode);
    }
    log.error('unhandled error', {
      requestId,
      method: c.req.method,
      path: c.req.path,
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
