/**
 * Egress through the gate: the host side of the in-sandbox proxy, and the decision both it and http.request
 * use. Sandboxes have no network device; the agent listens on the sandbox's loopback and hands each
 * connection to the server as a stream, which serve() handles:
 *
 *   client ──HTTP_PROXY──▶ agent (127.0.0.1:EGRESS_PORT in the sandbox) ══stream══▶ serve()
 *     CONNECT host:port      → decide → 200, then bytes both ways untouched (TLS passes through)
 *     GET http://host/path   → decide → request rewritten to origin form, Connection: close, relayed
 *
 * decide(): the pure policy.evaluateConnect (allow-list, Cedar net.connect), then the name is resolved on
 * the host and policy.checkAddresses picks an address outside the restricted ranges; the socket is opened
 * to exactly that address (no second lookup, so DNS rebinding cannot swap it). A refusal is a 403 whose
 * status line and body name the host, the rule, and how an operator allows it. Every connection, allowed
 * or refused, is one audit entry (`egress.connect`) written when it ends, with bytes each way and duration,
 * and is metered on the session.
 */
import { lookup } from 'node:dns/promises';
import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { AuditLog, Clock, Principal, SessionGateRecord, SessionRecord } from '../core/index.js';
import { checkAddresses, evaluateConnect, normalizeHost, parseIp, type ConnectRequest, type EgressRule, type PolicyEngine, type StageVerdict } from '../policy/index.js';
import type { GateState } from './gate-state.js';
import type { PendingCounts } from './metering.js';

/** The proxy's port on the sandbox's loopback (HTTP_PROXY=http://127.0.0.1:EGRESS_PORT). */
export const EGRESS_PORT = 3128;

/** The environment every session gets so that curl, pip, git, npm and apt use the proxy. */
export function egressEnv(port = EGRESS_PORT): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  const noProxy = 'localhost,127.0.0.1';
  return { HTTP_PROXY: url, HTTPS_PROXY: url, http_proxy: url, https_proxy: url, NO_PROXY: noProxy, no_proxy: noProxy };
}

/** Longest request head accepted from a client, bytes. */
const MAX_HEAD = 64 * 1024;
/** ms a client has to send its request head; ms to open the upstream connection. */
const HEAD_TIMEOUT_MS = 30_000;
const CONNECT_TIMEOUT_MS = 10_000;
/** Hop-by-hop headers of a plain proxy request, dropped before it is relayed. */
const HOP_HEADERS: ReadonlySet<string> = new Set(['proxy-connection', 'proxy-authorization', 'connection', 'keep-alive', 'te', 'trailer', 'upgrade']);

export type EgressVerdict =
  | { ok: true; host: string; port: number; address: string; family: 4 | 6; entry: string; verdicts: StageVerdict[] }
  | { ok: false; host: string; port: number; rule: EgressRule; reason: string; verdicts: StageVerdict[] };

export interface EgressDeps {
  state: GateState;
  clock: Clock;
  audit: AuditLog;
  /** The session's record (undefined when unknown). */
  session(id: string): Promise<SessionRecord | undefined>;
  meter(sessionId: string, f: Partial<PendingCounts>): void;
  log: (line: string) => void;
  /** Name resolution; default dns.lookup (all addresses, in the resolver's order). */
  resolve?: (host: string) => Promise<string[]>;
  /** The tenant's egress quota (maxEgressGb): throws quota_exceeded once it is used up. Checked per connection. */
  quota?: (sessionId: string) => Promise<void>;
}

export async function systemResolve(host: string): Promise<string[]> {
  const r = await lookup(host, { all: true, verbatim: true });
  return r.map((a) => a.address);
}

/** Gate decision for one new connection of a running session: allow-list, Cedar, then the resolved address. */
export async function decideConnect(d: EgressDeps, sessionId: string, req: ConnectRequest): Promise<EgressVerdict> {
  const r = await d.session(sessionId);
  if (!r || r.state !== 'running') {
    return { ok: false, host: normalizeHost(req.host), port: req.port, rule: 'policy', reason: `session ${sessionId} is ${r?.state ?? 'unknown'}; it cannot open connections`, verdicts: [] };
  }
  const row = await d.state.row(r);
  const policy = await d.state.policy(r.tenantId);
  return decideFor({ r, row, engine: policy.engine, now: d.clock.now(), log: d.log, ...(d.resolve ? { resolve: d.resolve } : {}) }, req);
}

/** The decision over loaded state; http.request (engine/gate.ts) calls it with the state it already holds. */
export async function decideFor(
  o: { r: SessionRecord; row: SessionGateRecord; engine: PolicyEngine; now: number; log: (line: string) => void; resolve?: (host: string) => Promise<string[]>; forbidsOnly?: boolean },
  req: ConnectRequest,
): Promise<EgressVerdict> {
  const { r, row } = o;
  const host = normalizeHost(req.host);
  const rules = { allow: row.settings.httpAllow, cidrs: row.settings.egressAllowCidr ?? [] };
  const ev = evaluateConnect({
    request: req,
    rules,
    session: { id: r.id, tenantId: r.tenantId, metadata: r.metadata, callsInSession: row.calls },
    policy: o.engine,
    now: o.now,
    ...(o.forbidsOnly ? { forbidsOnly: true } : {}),
  });
  if (ev.decision.effect === 'deny') return { ok: false, host, port: req.port, rule: ev.decision.rule, reason: ev.decision.reason, verdicts: ev.verdicts };
  const literal = parseIp(host);
  let addresses: string[];
  try {
    addresses = literal ? [host.replace(/^\[|\]$/g, '')] : await (o.resolve ?? systemResolve)(host);
  } catch (e) {
    addresses = [];
    o.log(`egress: ${host} did not resolve: ${(e as { code?: string }).code ?? (e as Error).message}`);
  }
  const ac = checkAddresses({ sessionId: r.id, host, port: req.port, addresses, cidrs: rules.cidrs });
  if (!ac.ok) {
    const verdicts: StageVerdict[] = [...ev.verdicts, { stage: 'policy', verdict: 'deny', code: 'policy_denied', detail: 'address refused', data: { host, addresses, range: ac.range, rule: 'address-range' } }];
    return { ok: false, host, port: req.port, rule: 'address-range', reason: ac.reason, verdicts };
  }
  return { ok: true, host, port: req.port, address: ac.address, family: ac.family, entry: ev.decision.entry, verdicts: ev.verdicts };
}

interface Head {
  method: string;
  target: string;
  version: string;
  headers: Array<[string, string]>;
  /** Bytes after the head, already read. */
  rest: Buffer;
}

/** Reads one HTTP request head; null when the client closed or sent something else. */
function readHead(s: Duplex): Promise<Head | null> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const done = (h: Head | null) => {
      clearTimeout(timer);
      s.off('data', onData);
      s.off('end', onEnd);
      s.off('error', onEnd);
      s.pause();
      resolve(h);
    };
    const onEnd = () => done(null);
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      const at = buf.indexOf('\r\n\r\n');
      if (at < 0) {
        if (buf.length > MAX_HEAD) done(null);
        return;
      }
      const lines = buf.subarray(0, at).toString('latin1').split('\r\n');
      const m = /^([A-Z]+) (\S+) (HTTP\/1\.[01])$/.exec(lines[0] ?? '');
      if (!m) return done(null);
      const headers: Array<[string, string]> = [];
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers.push([l.slice(0, i).trim(), l.slice(i + 1).trim()]);
      }
      done({ method: m[1] as string, target: m[2] as string, version: m[3] as string, headers, rest: buf.subarray(at + 4) });
    };
    const timer = setTimeout(() => done(null), HEAD_TIMEOUT_MS);
    s.on('data', onData);
    s.once('end', onEnd);
    s.once('error', onEnd);
    s.resume();
  });
}

/** The status line's reason phrase must be one line of visible ASCII. */
function phrase(text: string): string {
  const t = text.replace(/[^\x20-\x7e]/g, ' ');
  return t.length > 300 ? `${t.slice(0, 297)}...` : t;
}

function respond(s: Duplex, status: number, reasonPhrase: string, body: string, extra: Record<string, string> = {}): void {
  const b = Buffer.from(body.endsWith('\n') ? body : `${body}\n`, 'utf8');
  const headers = { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': String(b.length), Connection: 'close', ...extra };
  const head = `HTTP/1.1 ${status} ${phrase(reasonPhrase)}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${phrase(v)}\r\n`).join('')}\r\n`;
  s.end(Buffer.concat([Buffer.from(head, 'latin1'), b]));
}

/** host:port of a CONNECT target (IPv6 in brackets). */
function parseAuthority(t: string): { host: string; port: number } | null {
  const m = /^(\[[^\]]+\]|[^:\[\]]+):(\d{1,5})$/.exec(t);
  return m ? { host: m[1] as string, port: Number(m[2]) } : null;
}

export class EgressProxy {
  /** Live upstream sockets by session, closed when the session stops (closeSession). */
  private readonly live = new Map<string, Set<Duplex>>();

  constructor(private readonly d: EgressDeps) {}

  /** Serves one client connection of a session (a stream from the agent's proxy listener). Resolves when it ends. */
  async serve(sessionId: string, client: Duplex): Promise<void> {
    const started = this.d.clock.now();
    client.on('error', () => undefined);
    const head = await readHead(client);
    if (!head) {
      client.destroy();
      return;
    }
    let req: ConnectRequest;
    let url: URL | null = null;
    if (head.method === 'CONNECT') {
      const a = parseAuthority(head.target);
      if (!a) return respond(client, 400, 'Bad Request', `Berth egress: CONNECT needs host:port, got ${JSON.stringify(head.target)}`);
      req = { host: a.host, port: a.port, method: 'CONNECT' };
    } else {
      try {
        url = new URL(head.target);
      } catch {
        url = null;
      }
      if (!url || url.protocol !== 'http:') {
        return respond(client, 400, 'Bad Request', `Berth egress: the proxy takes CONNECT host:port (for https) or an absolute http:// URL, got ${JSON.stringify(head.target)}`);
      }
      req = { host: url.hostname, port: Number(url.port || 80), method: head.method };
    }
    let v: EgressVerdict;
    try {
      v = await decideConnect(this.d, sessionId, req);
    } catch (e) {
      this.d.log(`egress: decision for ${req.host}:${req.port} in ${sessionId} failed: ${(e as Error).stack ?? String(e)}`);
      return respond(client, 500, 'Internal Server Error', 'Berth egress: the connection could not be checked');
    }
    if (v.ok && this.d.quota) {
      try {
        await this.d.quota(sessionId);
      } catch (e) {
        if ((e as { code?: string }).code !== 'quota_exceeded') throw e;
        v = { ok: false, host: v.host, port: v.port, rule: 'quota', reason: `${(e as Error).message}; root raises it with: berth tenant set TENANT --max-egress-gb N`, verdicts: v.verdicts };
      }
    }
    if (!v.ok) {
      const short = `Forbidden by Berth egress: ${v.host}:${v.port} (rule ${v.rule})`;
      respond(client, 403, short, v.reason, { 'X-Berth-Egress-Rule': v.rule });
      this.d.meter(sessionId, { egressRefused: 1 });
      await this.record(sessionId, req, v, { bytesOut: 0, bytesIn: 0, durationMs: this.d.clock.now() - started, outcome: 'denied' });
      return;
    }
    let upstream: Socket;
    try {
      upstream = await this.open(v.address, v.port);
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message;
      respond(client, 502, 'Bad Gateway', `Berth egress: connecting to ${v.host}:${v.port} (${v.address}) failed: ${code}`);
      this.d.meter(sessionId, { egressConnections: 1 });
      await this.record(sessionId, req, v, { bytesOut: 0, bytesIn: 0, durationMs: this.d.clock.now() - started, outcome: 'error', error: code });
      return;
    }
    this.d.meter(sessionId, { egressConnections: 1 });
    let set = this.live.get(sessionId);
    if (!set) this.live.set(sessionId, (set = new Set()));
    set.add(upstream);
    const counts = { bytesOut: 0, bytesIn: 0 };
    if (url) {
      const path = `${url.pathname}${url.search}`;
      const lines = [`${head.method} ${path} HTTP/1.1`];
      for (const [k, val] of head.headers) if (!HOP_HEADERS.has(k.toLowerCase())) lines.push(`${k}: ${val}`);
      if (!head.headers.some(([k]) => k.toLowerCase() === 'host')) lines.push(`Host: ${url.host}`);
      lines.push('Connection: close');
      const out = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
      upstream.write(out);
      counts.bytesOut += out.length;
    } else {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
    }
    if (head.rest.length) {
      upstream.write(head.rest);
      counts.bytesOut += head.rest.length;
    }
    await this.pipe(client, upstream, counts);
    set.delete(upstream);
    if (set.size === 0) this.live.delete(sessionId);
    this.d.meter(sessionId, { egressBytesOut: counts.bytesOut, egressBytesIn: counts.bytesIn });
    await this.record(sessionId, req, v, { ...counts, durationMs: this.d.clock.now() - started, outcome: 'ok' });
  }

  /** Ends every open connection of a session (it is hibernating, paused or gone). */
  closeSession(sessionId: string): void {
    for (const s of this.live.get(sessionId) ?? []) s.destroy();
    this.live.delete(sessionId);
  }

  private open(address: string, port: number): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = netConnect({ host: address, port, noDelay: true });
      const t = setTimeout(() => s.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' })), CONNECT_TIMEOUT_MS);
      // Errors after connect are handled by pipe(); until then, this one keeps them from being unhandled.
      s.on('error', (e) => {
        clearTimeout(t);
        reject(e);
      });
      s.once('connect', () => {
        clearTimeout(t);
        resolve(s);
      });
    });
  }

  /** Bytes both ways until both sides are done; half-closes are passed on. */
  private pipe(client: Duplex, upstream: Socket, counts: { bytesOut: number; bytesIn: number }): Promise<void> {
    return new Promise((resolve) => {
      let open = 2;
      const end = () => {
        if (--open === 0) finish();
      };
      let finished = false;
      const finish = () => {
        if (finished) return;
        finished = true;
        client.destroy();
        upstream.destroy();
        resolve();
      };
      upstream.on('error', finish);
      client.on('error', finish);
      client.on('close', () => setImmediate(finish));
      upstream.on('close', () => setImmediate(finish));
      client.on('data', (c: Buffer) => {
        counts.bytesOut += c.length;
        if (!upstream.write(c)) client.pause();
      });
      upstream.on('drain', () => client.resume());
      upstream.on('data', (c: Buffer) => {
        counts.bytesIn += c.length;
        if (!client.write(c)) upstream.pause();
      });
      client.on('drain', () => upstream.resume());
      client.on('end', () => {
        upstream.end();
        end();
      });
      upstream.on('end', () => {
        client.end();
        end();
      });
      client.resume();
    });
  }

  private async record(
    sessionId: string,
    req: ConnectRequest,
    v: EgressVerdict,
    x: { bytesOut: number; bytesIn: number; durationMs: number; outcome: 'ok' | 'denied' | 'error'; error?: string },
  ): Promise<void> {
    const r = await this.d.session(sessionId);
    const principal: Principal = { kind: 'agent', id: sessionId, tenantId: r?.tenantId ?? null };
    const data: Record<string, unknown> = {
      host: v.host,
      port: v.port,
      ...(req.method ? { method: req.method } : {}),
      bytesOut: x.bytesOut,
      bytesIn: x.bytesIn,
      durationMs: x.durationMs,
      ...(v.ok ? { address: v.address, entry: v.entry } : { rule: v.rule, reason: v.reason }),
      ...(x.error ? { error: x.error } : {}),
    };
    try {
      await this.d.audit.append({ tenantId: r?.tenantId ?? null, sessionId, principal, action: 'egress.connect', outcome: x.outcome, data });
    } catch (e) {
      this.d.log(`egress: audit of ${v.host}:${v.port} for ${sessionId} failed: ${(e as Error).message}`);
    }
  }
}
