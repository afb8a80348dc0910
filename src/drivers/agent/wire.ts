/**
 * The wire side of the agent channel (PROTOCOL.md): limits, field encoding, errno mapping, line framing,
 * and the routes that turn the agent's answer lines into results. Everything here treats the agent's
 * bytes as untrusted: numbers are checked, lines bounded, and a malformed line fails only its request.
 */
import {
  AppError,
  InvalidArgumentError,
  InvalidStateError,
  NoSpaceError,
  NotFoundError,
  SandboxError,
  abortError,
} from '../../core/errors.js';
import type { FileEntry, FileType } from '../../core/sandbox.js';

/** 2 added guards (`P <id> <path> g`); a host still speaks 1 with an agent restored from an older image. */
export const AGENT_PROTOCOL_VERSION = 2;
export const AGENT_PROTOCOL_MIN = 1;
/** Longest line accepted from the agent, bytes (it never sends more than ~70 KiB). */
export const MAX_LINE = 1 << 20;
/** Raw bytes per D or I line we send (the agent uses the same size for o, e and D). */
export const CHUNK = 48 * 1024;
/** Read grants are sent in batches of this many consumed chunks (the agent starts with 16). */
export const GRANT_BATCH = 8;
/** Stdin bytes sent but not yet taken by the command (acknowledged with `i`). */
export const STDIN_WINDOW = 1 << 20;
/** A consumed exec stream holding more than this many unread bytes pauses the channel input... */
export const CONSUMER_HIGH_WATER = 4 << 20;
/** ...until it is back under this. */
export const CONSUMER_LOW_WATER = 1 << 20;
export const MAX_LIST_ENTRIES = 1_000_000;

// ---- small helpers ---------------------------------------------------------------------------------

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(v: T): void;
  reject(e: unknown): void;
  settled: boolean;
}

export function deferred<T>(): Deferred<T> {
  let res!: (v: T) => void;
  let rej!: (e: unknown) => void;
  const promise = new Promise<T>((a, b) => ((res = a), (rej = b)));
  promise.catch(() => undefined); // a rejection nobody awaits is not an unhandled one
  const d: Deferred<T> = {
    promise,
    settled: false,
    resolve: (v) => {
      if (!d.settled) (d.settled = true), res(v);
    },
    reject: (e) => {
      if (!d.settled) (d.settled = true), rej(e);
    },
  };
  return d;
}

/** Resolves or rejects like p, or rejects with the abort error when signal fires first. */
export function raceAbort<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(abortError(signal));
  p.catch(() => undefined);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => (signal.removeEventListener('abort', onAbort), resolve(v)),
      (e: unknown) => (signal.removeEventListener('abort', onAbort), reject(e)),
    );
  });
}

export const enc = (s: string): string => (s.length === 0 ? '-' : Buffer.from(s, 'utf8').toString('base64'));
export const dec = (s: string | undefined): Buffer => (s === undefined || s === '-' ? Buffer.alloc(0) : Buffer.from(s, 'base64'));
export const asBuffer = (u: Uint8Array): Buffer => (Buffer.isBuffer(u) ? u : Buffer.from(u.buffer, u.byteOffset, u.byteLength));

export function num(s: string | undefined): number {
  const n = s !== undefined && /^\d{1,16}$/.test(s) ? Number(s) : NaN;
  if (!Number.isSafeInteger(n)) throw new SandboxError(`malformed number from the agent: ${JSON.stringify(s)}`);
  return n;
}

export function checkPath(path: string): void {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) {
    throw new InvalidArgumentError('path must be an absolute path', { details: { path } });
  }
}

// ---- errors ---------------------------------------------------------------------------------------

/** Linux errno numbers (the agent always runs on Linux, whatever the host is). */
const ERRNO: Record<number, string> = {
  1: 'EPERM', 2: 'ENOENT', 3: 'ESRCH', 4: 'EINTR', 5: 'EIO', 7: 'E2BIG', 9: 'EBADF', 11: 'EAGAIN',
  12: 'ENOMEM', 13: 'EACCES', 16: 'EBUSY', 17: 'EEXIST', 18: 'EXDEV', 20: 'ENOTDIR', 21: 'EISDIR',
  22: 'EINVAL', 23: 'ENFILE', 24: 'EMFILE', 26: 'ETXTBSY', 27: 'EFBIG', 28: 'ENOSPC', 30: 'EROFS',
  31: 'EMLINK', 32: 'EPIPE', 36: 'ENAMETOOLONG', 38: 'ENOSYS', 39: 'ENOTEMPTY', 40: 'ELOOP', 116: 'ESTALE', 122: 'EDQUOT',
};

/** Maps an agent failure (`r <id> <errno> <message>`) to an AppError; details carry {errno, path}. */
export function agentError(errno: number, message: string, path?: string): AppError {
  const name = ERRNO[errno] ?? `E${errno}`;
  const details: Record<string, unknown> = { errno: name, ...(path === undefined ? {} : { path }) };
  switch (name) {
    case 'ENOENT':
      return new NotFoundError('path', path ?? '', { details });
    case 'EEXIST':
      return new AppError('conflict', message, { details });
    case 'ENOTDIR':
    case 'EISDIR':
    case 'EINVAL':
    case 'ENAMETOOLONG':
    case 'ELOOP':
      return new InvalidArgumentError(message, { details });
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new AppError('forbidden', message, { details });
    case 'ENOTEMPTY':
      return new InvalidStateError(message, { details });
    case 'ENOSPC':
    case 'EDQUOT':
      return new NoSpaceError(message, { details });
    default:
      return new SandboxError(message, { details });
  }
}

/** Parses the tail of `r <id> <errno> <message>` (fields after the id). */
export function failure(fields: string[], path?: string): AppError {
  return agentError(num(fields[0]), dec(fields[1]).toString('utf8'), path);
}
// ---- line framing ---------------------------------------------------------------------------------

/**
 * Splits a byte stream into '\n'-terminated lines without copying in the common case (a line inside one
 * chunk is a subarray of it). Lines longer than maxLine are discarded whole.
 */
export class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  private discarding = false;

  constructor(private readonly opts: { maxLine: number; onLine: (line: Buffer) => void }) {}

  push(chunk: Buffer): void {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a); nl >= 0; nl = chunk.indexOf(0x0a, start)) {
      if (this.discarding) {
        this.discarding = false;
      } else if (this.size === 0) {
        this.opts.onLine(chunk.subarray(start, nl));
      } else if (this.size + nl - start <= this.opts.maxLine) {
        this.parts.push(chunk.subarray(start, nl));
        const line = Buffer.concat(this.parts, this.size + nl - start);
        this.parts = [];
        this.size = 0;
        this.opts.onLine(line);
      } else {
        this.parts = [];
        this.size = 0;
      }
      start = nl + 1;
    }
    if (start >= chunk.length || this.discarding) return;
    if (this.size + chunk.length - start > this.opts.maxLine) {
      this.discarding = true;
      this.parts = [];
      this.size = 0;
    } else {
      this.parts.push(chunk.subarray(start));
      this.size += chunk.length - start;
    }
  }
}

// ---- routes: one per request in flight, keyed by id -------------------------------------------------

export const SP = 0x20;
export const V = { r: 0x72, o: 0x6f, e: 0x65, x: 0x78, i: 0x69, D: 0x44, s: 0x73, p: 0x70, h: 0x68 } as const;

export interface Route {
  /** A line for this route's id; `rest` is what follows "<verb> <id> ". */
  onLine(verb: number, rest: Buffer): void;
  /** The channel is gone. */
  onFail(err: AppError): void;
}

/** What the channel lends to its routes. */
export interface Link {
  send(line: string): void;
  sendFlow(line: string, signal?: AbortSignal): Promise<void>;
  release(id: number): void;
  hold(holder: object, on: boolean): void;
}

/** A request answered by one final line; `accept` turns answer lines into the result (or undefined). */
export class ReplyRoute<T> implements Route {
  readonly d = deferred<T>();
  constructor(
    private readonly path: string | undefined,
    private readonly accept: (verb: number, fields: string[]) => T | undefined,
  ) {}
  onLine(verb: number, rest: Buffer): void {
    const fields = rest.toString('latin1').split(' ');
    if (verb === V.r && fields[0] !== '0') return this.d.reject(failure(fields, this.path));
    const v = this.accept(verb, fields);
    if (v !== undefined) this.d.resolve(v);
  }
  onFail(err: AppError): void {
    this.d.reject(err);
  }
}

export function statFields(f: string[]): Omit<FileEntry, 'name'> {
  const type = f[0] as FileType;
  if (!['file', 'dir', 'symlink', 'other'].includes(type) || !/^[0-7]{1,5}$/.test(f[2] ?? '')) {
    throw new SandboxError('malformed stat from the agent');
  }
  const mtime = f[3] ?? '';
  const mtimeMs = mtime.startsWith('-') ? -num(mtime.slice(1)) : num(mtime); // before 1970 is possible
  return { type, size: num(f[1]), mode: parseInt(f[2]!, 8), mtimeMs };
}
