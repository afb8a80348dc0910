/**
 * http.request: egress from the host on the sandbox's behalf (sandboxes have no network), to allow-listed
 * hosts only. Redirects are not followed (a 3xx comes back as the result), so a response can never take the
 * request to a host the list does not name. Host names are matched as written: the list says which names
 * may be reached, not which addresses they resolve to.
 */
import { TimeoutError, isAppError } from '../core/index.js';
import type { ExecOutcome } from './tools-exec.js';

/** Request headers the agent may not set: they belong to the connection, not the request. */
const DROPPED_HEADERS: ReadonlySet<string> = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive', 'upgrade', 'te', 'trailer']);

export type HostCheck = { ok: true; host: string } | { ok: false; host: string | null; reason: string };

/**
 * Whether a URL's host is on the allow-list. Entries: `host` (the scheme's default port only),
 * `host:port`, `*.domain` (any subdomain, default port) and `*.domain:port`.
 */
export function checkHost(url: string, allow: readonly string[]): HostCheck {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { ok: false, host: null, reason: `${JSON.stringify(url)} is not a valid URL` };
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return { ok: false, host: null, reason: `only http and https URLs can be requested` };
  const hostname = u.hostname.toLowerCase();
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  const defaultPort = u.port === '';
  const host = defaultPort ? hostname : `${hostname}:${port}`;
  for (const entry of allow) {
    const m = /^(.*?)(?::(\d+))?$/.exec(entry);
    const name = m?.[1] ?? entry;
    const ePort = m?.[2];
    const portOk = ePort === undefined ? defaultPort : ePort === port;
    if (!portOk) continue;
    if (name.startsWith('*.') ? hostname.endsWith(name.slice(1)) && hostname.length > name.length - 1 : hostname === name) return { ok: true, host };
  }
  const allowed = allow.length ? `this session may reach only ${allow.join(', ')}` : 'this session may not reach any host (its http allow-list is empty)';
  return { ok: false, host, reason: `host ${host} is not on the session's http allow-list: ${allowed}; ask the operator to allow it` };
}

export interface HttpOptions {
  allow: readonly string[];
  /** ms. */
  timeoutMs: number;
  /** Largest response body kept, bytes; a longer one is refused as truncated. */
  maxBytes: number;
  signal?: AbortSignal;
}

export async function httpRequest(args: Record<string, unknown>, o: HttpOptions): Promise<ExecOutcome> {
  const url = args.url as string;
  const method = args.method as string;
  const hc = checkHost(url, o.allow);
  if (!hc.ok) return { outputError: hc.reason };
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries((args.headers as Record<string, string> | undefined) ?? {})) {
    if (!DROPPED_HEADERS.has(k.toLowerCase())) headers[k] = v;
  }
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = o.signal ? AbortSignal.any([timeout, o.signal]) : timeout;
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers,
      body: method === 'GET' || method === 'HEAD' ? undefined : ((args.body as string | undefined) ?? undefined),
      redirect: 'manual',
      signal,
    });
  } catch (e) {
    if (timeout.aborted) throw new TimeoutError(`http.request to ${hc.host} took longer than ${o.timeoutMs} ms`);
    if (isAppError(e)) throw e;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return { outputError: `the request to ${hc.host} failed: ${cause?.code ?? cause?.message ?? (e as Error).message}` };
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  let truncated = false;
  if (res.body) {
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        total += value.byteLength;
        if (total > o.maxBytes) {
          truncated = true;
          break;
        }
        chunks.push(value);
      }
    } catch (e) {
      if (timeout.aborted) throw new TimeoutError(`http.request to ${hc.host} took longer than ${o.timeoutMs} ms`);
      return { outputError: `reading the response from ${hc.host} failed: ${(e as Error).message}` };
    } finally {
      if (truncated) await reader.cancel().catch(() => undefined);
      reader.releaseLock();
    }
  }
  if (truncated) return { outputError: `output was truncated: the response body is larger than ${o.maxBytes} bytes` };
  const outHeaders: Record<string, string> = {};
  res.headers.forEach((v, k) => (outHeaders[k] = v));
  const bytes = Buffer.concat(chunks);
  const text = decodeUtf8(bytes);
  return {
    output: { status: res.status, headers: outHeaders, truncated: false, ...(text === null ? { bodyBase64: bytes.toString('base64') } : { body: text }) },
  };
}

/** The text when the bytes are valid UTF-8, else null. */
export function decodeUtf8(bytes: Uint8Array): string | null {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}
