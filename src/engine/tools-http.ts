/**
 * http.request: egress from the host on the sandbox's behalf, under the session's one egress rule set (the
 * same allow-list and address checks as its proxy, policy/egress.ts). evaluate() refused a host off the
 * allow-list before this runs; here, right before connecting, the list is checked again, the name is
 * resolved on the host, an address outside the restricted ranges (unless the operator allowed the range)
 * is picked, and the request is sent to exactly that address (a pinned lookup), never to a second
 * resolution, so DNS rebinding cannot move it; TLS still verifies the certificate against the host name.
 * Redirects are not followed (a 3xx comes back as the result).
 */
import { request as httpReq, type IncomingMessage } from 'node:http';
import { request as httpsReq } from 'node:https';
import type { LookupFunction } from 'node:net';
import { TimeoutError } from '../core/index.js';
import { checkAddresses, checkHost, parseIp } from '../policy/index.js';
import { systemResolve } from './egress.js';
import type { ExecOutcome } from './executor.js';

/** Request headers the agent may not set: they belong to the connection, not the request. */
const DROPPED_HEADERS: ReadonlySet<string> = new Set(['host', 'connection', 'content-length', 'transfer-encoding', 'keep-alive', 'upgrade', 'te', 'trailer']);

/** The address the egress checks picked for this request. */
export interface HttpPin {
  address: string;
  family: 4 | 6;
}

export interface HttpOptions {
  /** The session's egress allow-list and range allowances. */
  allow: readonly string[];
  cidrs: readonly string[];
  sessionId: string;
  /** ms. */
  timeoutMs: number;
  /** Largest response body kept, bytes; a longer one is refused as truncated. */
  maxBytes: number;
  /** Name resolution; default dns.lookup. */
  resolve?: (host: string) => Promise<string[]>;
  signal?: AbortSignal;
}

export async function httpRequest(args: Record<string, unknown>, o: HttpOptions): Promise<ExecOutcome> {
  const url = new URL(args.url as string);
  const method = args.method as string;
  const host = url.port ? `${url.hostname}:${url.port}` : url.hostname;
  let pin: HttpPin;
  {
    const hc = checkHost(args.url as string, o.allow);
    if (!hc.ok) return { outputError: hc.reason };
    const name = url.hostname.replace(/^\[|\]$/g, '');
    let addresses: string[] = [];
    try {
      addresses = parseIp(url.hostname) ? [name] : await (o.resolve ?? systemResolve)(name);
    } catch {
      addresses = [];
    }
    const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
    const ac = checkAddresses({ sessionId: o.sessionId, host: url.hostname, port, addresses, cidrs: o.cidrs });
    if (!ac.ok) return { outputError: ac.reason };
    pin = { address: ac.address, family: ac.family };
  }
  const checked = pin;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries((args.headers as Record<string, string> | undefined) ?? {})) {
    if (!DROPPED_HEADERS.has(k.toLowerCase())) headers[k] = v;
  }
  const body = method === 'GET' || method === 'HEAD' ? undefined : ((args.body as string | undefined) ?? undefined);
  if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
  const pinned: LookupFunction = (_name, opts, cb) => {
    if ((opts as { all?: boolean }).all) (cb as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address: checked.address, family: checked.family }]);
    else cb(null, checked.address, checked.family);
  };
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = o.signal ? AbortSignal.any([timeout, o.signal]) : timeout;
  const timedOut = () => new TimeoutError(`http.request to ${host} took longer than ${o.timeoutMs} ms`);
  const send = url.protocol === 'https:' ? httpsReq : httpReq;
  let res: IncomingMessage;
  try {
    res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = send(url, { method, headers, lookup: pinned, signal, agent: false }, resolve);
      req.on('error', reject);
      req.end(body);
    });
  } catch (e) {
    if (timeout.aborted) throw timedOut();
    if (signal.aborted) throw e;
    return { outputError: `the request to ${host} failed: ${(e as { code?: string }).code ?? (e as Error).message}` };
  }
  const chunks: Buffer[] = [];
  let total = 0;
  let truncated = false;
  try {
    for await (const chunk of res as AsyncIterable<Buffer>) {
      total += chunk.byteLength;
      if (total > o.maxBytes) {
        truncated = true;
        break;
      }
      chunks.push(chunk);
    }
  } catch (e) {
    if (timeout.aborted) throw timedOut();
    return { outputError: `reading the response from ${host} failed: ${(e as Error).message}` };
  } finally {
    res.destroy();
  }
  if (truncated) return { outputError: `output was truncated: the response body is larger than ${o.maxBytes} bytes` };
  const outHeaders: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) outHeaders[k] = Array.isArray(v) ? v.join(', ') : v;
  const bytes = Buffer.concat(chunks);
  const text = decodeUtf8(bytes);
  return {
    output: { status: res.statusCode ?? 0, headers: outHeaders, truncated: false, ...(text === null ? { bodyBase64: bytes.toString('base64') } : { body: text }) },
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
