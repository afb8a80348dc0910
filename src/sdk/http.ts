/**
 * The SDK's one door to the server: builds URLs, adds the bearer token, applies deadlines, and turns
 * every failure into an AppError (HTTP error bodies via fromWireError, network failures → unavailable).
 */
import { AppError, abortError } from '../core/errors.js';
import { fromWireError } from '../protocol/errors.js';

export interface ResolvedClientOptions {
  readonly url: string;
  readonly token: string | undefined;
  readonly fetch: typeof globalThis.fetch;
  readonly timeoutMs: number;
}

export type Query = Record<string, string | number | boolean | undefined>;

export interface SendOptions {
  query?: Query;
  /** Repeated query parameters (`metadata=a=1&metadata=b=2`). */
  multi?: Record<string, string[]>;
  /** A JSON body. */
  json?: unknown;
  /** A raw body; a ReadableStream is streamed (duplex: 'half'). */
  body?: Uint8Array | string | ReadableStream<Uint8Array>;
  signal?: AbortSignal;
  /** Apply the client's unary deadline (timeoutMs). Default true; streams pass false. */
  deadline?: boolean;
  /** Allow /healthz's 503 through as a response. */
  acceptStatus?: number[];
  /** Under /v1 (default) or at the root (/healthz). */
  root?: boolean;
  /**
   * Send a fresh random Idempotency-Key and, when the connection fails (no HTTP answer came), send the
   * request once more with the same key: the server answers the retry with the first attempt's answer
   * instead of doing it twice. HTTP errors are not retried. Only for bodies that can be sent twice (JSON).
   */
  idempotent?: boolean;
}

/** The header the server dedupes creating POSTs by (issue 7 §11). */
export const IDEMPOTENCY_HEADER = 'idempotency-key';

export class Transport {
  constructor(readonly o: ResolvedClientOptions) {}

  url(path: string, query?: Query, root = false, multi?: Record<string, string[]>): string {
    const u = new URL(`${this.o.url.replace(/\/+$/, '')}${root ? '' : '/v1'}${path}`);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, String(v));
    for (const [k, list] of Object.entries(multi ?? {})) for (const v of list) u.searchParams.append(k, v);
    return u.toString();
  }

  /** Combined signal: the caller's, and the deadline for unary calls. */
  signalFor(signal: AbortSignal | undefined, deadline: boolean): AbortSignal | undefined {
    const list: AbortSignal[] = [];
    if (signal) list.push(signal);
    if (deadline && this.o.timeoutMs > 0) list.push(AbortSignal.timeout(this.o.timeoutMs));
    if (list.length <= 1) return list[0];
    return AbortSignal.any(list);
  }

  async send(method: string, path: string, opts: SendOptions = {}): Promise<{ res: Response; signal: AbortSignal | undefined }> {
    const signal = this.signalFor(opts.signal, opts.deadline ?? true);
    if (signal?.aborted) throw abortError(signal);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.o.token) headers.authorization = `Bearer ${this.o.token}`;
    let body: Uint8Array | string | ReadableStream<Uint8Array> | undefined = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] = 'application/json';
    } else if (body !== undefined) {
      headers['content-type'] = 'application/octet-stream';
    }
    const init: RequestInit & { duplex?: 'half'; window?: null } = { method, headers, body: body as BodyInit | undefined, signal };
    if (body instanceof ReadableStream) {
      init.duplex = 'half';
      // fetch clones a request (teeing a stream body, so the unread branch buffers the whole upload) unless
      // it can never be replayed: window null + redirect 'error' skips the clone (nodejs/undici#4058).
      init.window = null;
      init.redirect = 'error';
    }
    if (opts.idempotent) headers[IDEMPOTENCY_HEADER] = idempotencyKey();
    const url = this.url(path, opts.query, opts.root, opts.multi);
    let res: Response;
    try {
      res = await this.o.fetch(url, init);
    } catch (e) {
      const failure = this.failure(e, signal, `${method} ${path}`);
      // Once, on a connection error only (not the caller's abort or deadline), with the same key.
      if (!opts.idempotent || failure.code !== 'unavailable' || typeof body !== 'string') throw failure;
      try {
        res = await this.o.fetch(url, init);
      } catch (e2) {
        throw this.failure(e2, signal, `${method} ${path}`);
      }
    }
    if (!res.ok && !opts.acceptStatus?.includes(res.status)) {
      const text = await res.text().catch(() => '');
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      throw fromWireError(parsed, res.status);
    }
    return { res, signal };
  }

  async json<T>(method: string, path: string, opts: SendOptions = {}): Promise<T> {
    const { res, signal } = await this.send(method, path, opts);
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      throw this.failure(e, signal, `${method} ${path}`);
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new AppError('internal', `${method} ${path}: the server sent a response that is not JSON`);
    }
  }

  /** Maps a thrown fetch or body-read failure: the caller's abort or deadline, else the network. */
  failure(e: unknown, signal: AbortSignal | undefined, what: string): AppError {
    if (e instanceof AppError) return e;
    if (signal?.aborted) return abortError(signal);
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (e as Error).message ?? String(e);
    // undici gives up on a silent server after 300 s (headers or body): a deadline, not a missing server.
    if (cause?.code === 'UND_ERR_HEADERS_TIMEOUT' || cause?.code === 'UND_ERR_BODY_TIMEOUT') {
      return new AppError('timeout', `Berth at ${this.o.url} did not answer in time (${what}): ${why}`, { cause: e, retryable: true });
    }
    return new AppError('unavailable', `cannot reach Berth at ${this.o.url} (${what}): ${why}`, { cause: e, retryable: true });
  }
}

/** A random key for Idempotency-Key. `crypto.randomUUID` exists only in secure contexts (a console page
 *  served over plain http on a LAN has none); `getRandomValues` exists everywhere the web platform does. */
function idempotencyKey(): string {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === 'function') return c.randomUUID();
  if (typeof c?.getRandomValues !== 'function') throw new AppError('config', 'no Web Crypto here: the SDK needs crypto.getRandomValues for idempotency keys');
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
