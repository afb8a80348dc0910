/**
 * The wire form of AppError. Only the server maps codes to HTTP statuses (httpStatus, toWireError); the
 * SDK turns a wire body back into an AppError with the same code (fromWireError).
 */
import { AppError, ERROR_CODES, isAppError, type ErrorCode } from '../core/errors.js';
import type { ErrorBody, WireError } from './types.js';

const STATUS: Record<ErrorCode, number> = {
  invalid_argument: 400,
  payload_too_large: 413,
  // WebDAV's Insufficient Storage: the server, not the request, is short of room.
  no_space: 507,
  unauthenticated: 401,
  forbidden: 403,
  policy_denied: 403,
  not_found: 404,
  invalid_state: 409,
  conflict: 409,
  timeout: 504,
  // nginx's "client closed request": the caller went away or cancelled.
  cancelled: 499,
  result_invalid: 502,
  // a gateway whose upstream (the port inside the sandbox) refused the connection
  port_closed: 502,
  unavailable: 503,
  sandbox_failed: 503,
  config: 500,
  internal: 500,
  // issue 12: quotas and the refusal rate limit
  quota_exceeded: 429,
  rate_limited: 429,
  // the request is well formed but cannot be processed with this key (Stripe answers the same)
  idempotency_mismatch: 422,
};

export function httpStatus(code: ErrorCode): number {
  return STATUS[code];
}

/** What a client may assume from a status alone, when the body is not ours (a proxy's page, say). */
function codeForStatus(status: number): ErrorCode {
  switch (status) {
    case 400:
      return 'invalid_argument';
    case 401:
      return 'unauthenticated';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 409:
      return 'conflict';
    case 413:
      return 'payload_too_large';
    case 499:
      return 'cancelled';
    case 507:
      return 'no_space';
    case 502:
    case 503:
      return 'unavailable';
    case 504:
      return 'timeout';
    case 429:
      return 'rate_limited';
    default:
      return 'internal';
  }
}

export const INTERNAL_MESSAGE = 'internal error';

/**
 * The JSON-safe wire form of any thrown value. Only AppErrors keep their message; anything else becomes a
 * generic `internal` error, so stacks and library messages never leave the server.
 */
export function toWireError(e: unknown): WireError {
  if (!isAppError(e)) return { code: 'internal', message: INTERNAL_MESSAGE };
  const out: WireError = { code: e.code, message: e.message };
  const details = jsonSafe(e.details);
  if (details) out.details = details;
  if (e.retryable) out.retryable = true;
  return out;
}

export function toErrorBody(e: unknown): ErrorBody {
  return { error: toWireError(e) };
}

function jsonSafe(d: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!d) return undefined;
  try {
    const s = JSON.stringify(d, (_k, v: unknown) => (v instanceof Error ? { name: v.name, message: v.message } : v));
    return s === undefined ? undefined : (JSON.parse(s) as Record<string, unknown>);
  } catch {
    return undefined;
  }
}

function isErrorCode(s: unknown): s is ErrorCode {
  return typeof s === 'string' && (ERROR_CODES as readonly string[]).includes(s);
}

/** Rebuilds an AppError from a response body (parsed JSON or not) and status. */
export function fromWireError(body: unknown, status: number): AppError {
  const w = (body as Partial<ErrorBody> | null | undefined)?.error;
  if (w && typeof w === 'object' && typeof w.message === 'string' && isErrorCode(w.code)) {
    const details = w.details && typeof w.details === 'object' ? w.details : undefined;
    return new AppError(w.code, w.message, {
      details: { ...details, httpStatus: status },
      retryable: w.retryable === true || w.code === 'unavailable' || w.code === 'timeout',
    });
  }
  const code = codeForStatus(status);
  const retryable = code === 'unavailable' || code === 'timeout';
  const message = w && typeof w.message === 'string' ? w.message : `HTTP ${status}`;
  return new AppError(code, message, { details: { httpStatus: status }, retryable });
}
