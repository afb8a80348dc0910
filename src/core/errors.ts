/**
 * The one error root. Every error Berth raises extends AppError and carries a stable string `code`.
 * Only the server maps codes to HTTP statuses; the SDK rebuilds an AppError from the wire body.
 */
export const ERROR_CODES = [
  'invalid_argument', // bad input: a field is missing, of the wrong type or out of range
  'unauthenticated', // no or unknown credential
  'forbidden', // the credential is valid but may not do this
  'not_found', // no such object (or not visible to this principal)
  'invalid_state', // the object exists but its state forbids the operation
  'conflict', // a concurrent change or a duplicate
  'timeout', // a deadline passed
  'cancelled', // the caller's AbortSignal fired
  'sandbox_failed', // the sandbox backend failed or died
  'unavailable', // a needed component is missing on this machine
  'config', // invalid configuration (never silently corrected)
  'policy_denied', // the gate refused a tool call
  'result_invalid', // a tool's output failed validation
  'payload_too_large',
  'no_space', // a disk Berth writes to (checkpoint images, the data directory) has too little room
  // issue 12: quotas and the refusal rate limit
  'quota_exceeded', // a tenant quota (sessions, memory, snapshots, egress) would be exceeded
  'rate_limited', // too many requests refused in a row (an open breaker); retry after details.retryAfterS
  'port_closed', // nothing listens on the TCP port asked for inside the sandbox (ports, egress transport)
  // issue 7 §11: an Idempotency-Key reused with a different request (method, path or body)
  'idempotency_mismatch',
  'internal',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export interface AppErrorOptions {
  details?: Record<string, unknown>;
  retryable?: boolean;
  cause?: unknown;
}

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly details?: Record<string, unknown>;
  readonly retryable: boolean;
  constructor(code: ErrorCode, message: string, opts: AppErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = opts.details;
    this.retryable = opts.retryable ?? false;
  }
}

export class InvalidArgumentError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('invalid_argument', message, opts);
  }
}
export class NotFoundError extends AppError {
  constructor(kind: string, id: string, opts: AppErrorOptions = {}) {
    super('not_found', `${kind} ${JSON.stringify(id)} not found`, { ...opts, details: { kind, id, ...opts.details } });
  }
}
export class InvalidStateError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('invalid_state', message, opts);
  }
}
export class ConfigError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('config', message, opts);
  }
}
export class SandboxError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('sandbox_failed', message, opts);
  }
}
export class TimeoutError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('timeout', message, { retryable: true, ...opts });
  }
}
export class CancelledError extends AppError {
  constructor(message = 'the operation was cancelled', opts: AppErrorOptions = {}) {
    super('cancelled', message, opts);
  }
}
/** Not enough room on a disk for what was asked (a checkpoint image, say); nothing was changed. */
export class NoSpaceError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('no_space', message, opts);
  }
}
export class UnavailableError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super('unavailable', message, opts);
  }
}

/** Nothing listens on a TCP port inside the sandbox (the connection was refused on 127.0.0.1 and ::1). */
export class PortClosedError extends AppError {
  constructor(port: number, opts: AppErrorOptions = {}) {
    super('port_closed', `nothing is listening on port ${port} inside the sandbox`, { ...opts, details: { port, ...opts.details } });
  }
}

/**
 * A guarded operation (CallOptions.guard) was not run: `path` is not canonical in the sandbox (a symlink or
 * a `..` leads elsewhere: `canonical`, or null when it could not be resolved). Nothing was changed.
 */
export class PathNotCanonicalError extends AppError {
  constructor(
    readonly path: string,
    readonly canonical: string | null,
    opts: AppErrorOptions = {},
  ) {
    super('conflict', `not run: ${path} is not canonical${canonical === null ? '' : ` (it resolves to ${canonical})`}`, { ...opts, details: { path, canonical, ...opts.details } });
  }
}

export function isAppError(e: unknown): e is AppError {
  return e instanceof AppError;
}

/** Turns an AbortSignal's reason into an AppError (timeout vs. cancellation). */
export function abortError(signal: AbortSignal): AppError {
  const r: unknown = signal.reason;
  if (r instanceof AppError) return r;
  if (r instanceof Error && r.name === 'TimeoutError') return new TimeoutError('the operation timed out', { cause: r });
  return new CancelledError(undefined, { cause: r });
}

export function throwIfAborted(signal?: AbortSignal): void {
  if (signal?.aborted) throw abortError(signal);
}
