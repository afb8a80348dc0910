/**
 * Egress: the one rule set for every connection a session makes to the outside, whether through the
 * in-sandbox proxy (`net.connect`) or the host-side http.request tool. Pure: the engine resolves names and
 * opens sockets; this file decides.
 *
 * A connection is allowed when, in this order:
 *   1. allow-list  the host (as the client named it) matches an entry of the session's egress allow-list.
 *                  Default: the list is empty, so nothing is allowed.
 *   2. policy      the tenant's Cedar policy permits `Action::"net.connect"` (in the "write" group) with
 *                  context {host, port, method?}; a forbid wins over the allow-list.
 *   3. address     (after the engine resolved the name on the host) the address connected to is not in a
 *                  restricted range (loopback, private, link-local, metadata, unspecified) unless the
 *                  operator allowed that range with an egress CIDR. The engine connects to exactly the
 *                  address checked here, so a name cannot be re-resolved to somewhere else (DNS rebinding).
 *
 * Allow-list entries: `host` and `*.suffix` (ports 80 and 443), `host:port`, `*.suffix:port`, an IP
 * literal (`10.1.2.3`, `[::1]`, optionally `:port`), or a CIDR (`10.0.0.0/8`: IP-literal hosts inside it,
 * any port). Host names are lower-cased; `*.example.com` matches `a.example.com`, not `example.com`.
 */
import { InvalidArgumentError } from '../core/index.js';
import type { AuthorizeResult, PolicyEngine } from './cedar.js';
import type { SessionFacts } from './gate.js';
import type { StageVerdict } from './types.js';

import { NET_CONNECT } from './cedar-schema.js';
/** Ports an allow-list entry without a port covers. */
export const DEFAULT_EGRESS_PORTS: readonly number[] = Object.freeze([80, 443]);
/** Most entries in one allow-list (hosts and CIDRs each). */
export const MAX_EGRESS_ENTRIES = 256;

/** Ranges refused unless the operator allows them (`--egress-allow-cidr`). */
export const RESTRICTED_RANGES: readonly string[] = Object.freeze([
  '0.0.0.0/8', // "this host": connecting to 0.0.0.0 reaches loopback on Linux
  '127.0.0.0/8',
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '169.254.0.0/16', // link-local, cloud metadata (169.254.169.254)
  '::/128',
  '::1/128',
  'fc00::/7', // unique local, including fd00:ec2::254 (metadata)
  'fe80::/10',
]);

// ---- IP addresses --------------------------------------------------------------------------------------

export interface Ip {
  v: 4 | 6;
  n: bigint;
}

function parseV4(s: string): bigint | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let n = 0n;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255 || (p.length > 1 && p.startsWith('0'))) return null;
    n = (n << 8n) | BigInt(p);
  }
  return n;
}

function parseV6(s: string): bigint | null {
  if (!/^[0-9a-f:.]+$/i.test(s)) return null;
  let tail: bigint | null = null;
  let text = s;
  const lastColon = s.lastIndexOf(':');
  if (s.includes('.')) {
    tail = parseV4(s.slice(lastColon + 1));
    if (tail === null) return null;
    text = `${s.slice(0, lastColon + 1)}0:0`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const groups = (h: string): string[] | null => (h === '' ? [] : h.split(':'));
  const head = groups(halves[0] as string);
  const rest = halves.length === 2 ? groups(halves[1] as string) : [];
  if (!head || !rest) return null;
  const missing = 8 - head.length - rest.length;
  if ((halves.length === 2 && missing < 1) || (halves.length === 1 && missing !== 0)) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest];
  let n = 0n;
  for (const g of all) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
    n = (n << 16n) | BigInt(parseInt(g, 16));
  }
  if (tail !== null) n = (n & ~0xffffffffn) | tail;
  return n;
}

/** An IPv4 or IPv6 literal (brackets allowed), IPv4-mapped IPv6 as IPv4; null when not an address. */
export function parseIp(s: string): Ip | null {
  const t = s.startsWith('[') && s.endsWith(']') ? s.slice(1, -1) : s;
  const v4 = parseV4(t);
  if (v4 !== null) return { v: 4, n: v4 };
  if (!t.includes(':')) return null;
  const v6 = parseV6(t);
  if (v6 === null) return null;
  if (v6 >> 32n === 0xffffn) return { v: 4, n: v6 & 0xffffffffn };
  return { v: 6, n: v6 };
}

export interface Cidr {
  text: string;
  ip: Ip;
  bits: number;
}

export function parseCidr(s: string): Cidr | null {
  const m = /^(.+)\/(\d{1,3})$/.exec(s);
  const ip = m ? parseIp(m[1] as string) : null;
  if (!m || !ip) return null;
  const bits = Number(m[2]);
  const width = ip.v === 4 ? 32 : 128;
  // An IPv4-mapped prefix (::ffff:a.b.c.d/n) counts in IPv6 bits.
  const b = ip.v === 4 && (m[1] as string).includes(':') ? bits - 96 : bits;
  if (b < 0 || b > width) return null;
  return { text: s, ip: { v: ip.v, n: ip.n & mask(ip.v, b) }, bits: b };
}

function mask(v: 4 | 6, bits: number): bigint {
  const width = BigInt(v === 4 ? 32 : 128);
  const all = (1n << width) - 1n;
  return all ^ ((1n << (width - BigInt(bits))) - 1n);
}

export function inCidr(ip: Ip, c: Cidr): boolean {
  return ip.v === c.ip.v && (ip.n & mask(ip.v, c.bits)) === c.ip.n;
}

const RESTRICTED: readonly Cidr[] = RESTRICTED_RANGES.map((r) => parseCidr(r) as Cidr);

/** The restricted range an address falls in, or null. */
export function restrictedRange(ip: Ip): string | null {
  return RESTRICTED.find((c) => inCidr(ip, c))?.text ?? null;
}

// ---- the allow-list ------------------------------------------------------------------------------------

export type EgressEntry =
  | { kind: 'host'; text: string; name: string; port: number | null }
  | { kind: 'suffix'; text: string; suffix: string; port: number | null }
  | { kind: 'ip'; text: string; ip: Ip; port: number | null }
  | { kind: 'cidr'; text: string; cidr: Cidr };

const NAME_RE = /^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$/;

/** One allow-list entry, or null when it is not a host, wildcard, IP or CIDR. */
export function parseEgressEntry(raw: string): EgressEntry | null {
  const s = raw.trim().toLowerCase();
  if (s === '' || s.length > 300) return null;
  if (s.includes('/')) {
    const c = parseCidr(s);
    return c ? { kind: 'cidr', text: c.text, cidr: c } : null;
  }
  let host = s;
  let port: number | null = null;
  let portText: string | undefined;
  if (s.startsWith('[')) {
    const b = /^(\[[^\]]+\])(?::([^:]*))?$/.exec(s);
    if (!b) return null;
    host = b[1] as string;
    portText = b[2];
  } else {
    const parts = s.split(':');
    if (parts.length > 2) return null; // a bare IPv6 address must be bracketed
    host = parts[0] as string;
    portText = parts[1];
  }
  if (portText !== undefined) {
    if (!/^\d{1,5}$/.test(portText)) return null;
    port = Number(portText);
  }
  if (port !== null && (port < 1 || port > 65535)) return null;
  const ip = parseIp(host);
  if (ip) return { kind: 'ip', text: s, ip, port };
  if (host.startsWith('*.')) {
    const suffix = host.slice(2);
    return NAME_RE.test(suffix) ? { kind: 'suffix', text: s, suffix, port } : null;
  }
  return NAME_RE.test(host) && host.length <= 253 ? { kind: 'host', text: s, name: host, port } : null;
}

/** Checks and normalizes an allow-list (lower-cased, trimmed, duplicates dropped); `field` names it in errors. */
export function normalizeEgressAllow(list: unknown, field = 'egressAllow'): string[] {
  if (!Array.isArray(list) || !list.every((h) => typeof h === 'string')) {
    throw new InvalidArgumentError(`${field}: must be an array of host names`, { details: { field } });
  }
  if (list.length > MAX_EGRESS_ENTRIES) throw new InvalidArgumentError(`${field}: at most ${MAX_EGRESS_ENTRIES} entries`, { details: { field } });
  const out = new Set<string>();
  for (const raw of list as string[]) {
    const e = parseEgressEntry(raw);
    if (!e) {
      throw new InvalidArgumentError(`${field}: ${JSON.stringify(raw)} is not a host, host:port, *.domain, IP address or CIDR`, { details: { field, value: raw } });
    }
    out.add(e.text);
  }
  return [...out];
}

/** Checks and normalizes the operator's range allowances (CIDRs only). */
export function normalizeEgressCidrs(list: unknown, field = 'egressAllowCidr'): string[] {
  if (!Array.isArray(list) || !list.every((h) => typeof h === 'string')) {
    throw new InvalidArgumentError(`${field}: must be an array of CIDRs`, { details: { field } });
  }
  if (list.length > MAX_EGRESS_ENTRIES) throw new InvalidArgumentError(`${field}: at most ${MAX_EGRESS_ENTRIES} entries`, { details: { field } });
  const out = new Set<string>();
  for (const raw of list as string[]) {
    const c = parseCidr(raw.trim().toLowerCase());
    if (!c) throw new InvalidArgumentError(`${field}: ${JSON.stringify(raw)} is not a CIDR (e.g. 127.0.0.0/8, fc00::/7)`, { details: { field, value: raw } });
    out.add(c.text);
  }
  return [...out];
}

/** A host as clients write it: lower case, IPv6 in brackets. */
export function normalizeHost(host: string): string {
  const h = host.trim().toLowerCase().replace(/\.$/, '');
  const ip = parseIp(h);
  if (ip?.v === 6 && !h.startsWith('[')) return `[${h}]`;
  return h;
}

/** The allow-list entry that lets (host, port) through, or null. */
export function matchEgressAllow(host: string, port: number, allow: readonly string[]): string | null {
  const h = normalizeHost(host);
  const ip = parseIp(h);
  const portOk = (p: number | null): boolean => (p === null ? DEFAULT_EGRESS_PORTS.includes(port) : p === port);
  for (const text of allow) {
    const e = parseEgressEntry(text);
    if (!e) continue;
    switch (e.kind) {
      case 'host':
        if (!ip && e.name === h && portOk(e.port)) return text;
        break;
      case 'suffix':
        if (!ip && h.endsWith(`.${e.suffix}`) && portOk(e.port)) return text;
        break;
      case 'ip':
        if (ip && ip.v === e.ip.v && ip.n === e.ip.n && portOk(e.port)) return text;
        break;
      case 'cidr':
        if (ip && inCidr(ip, e.cidr)) return text;
        break;
    }
  }
  return null;
}

// ---- the decision --------------------------------------------------------------------------------------

export interface EgressRules {
  /** Normalized allow-list entries (normalizeEgressAllow). */
  allow: readonly string[];
  /** Normalized CIDRs lifting the restricted-range refusal (normalizeEgressCidrs). */
  cidrs: readonly string[];
}

export interface ConnectRequest {
  /** As the client named it (host of the CONNECT line or of the URL). */
  host: string;
  port: number;
  /** The HTTP method of a plain proxy request or of http.request; CONNECT for a tunnel. */
  method?: string;
}

/** Which rule refused: the allow-list, a Cedar policy, or the address range. */
export type EgressRule = 'allow-list' | 'policy' | 'address-range' | 'bad-request' | 'quota';

export type ConnectDecision =
  | { effect: 'allow'; host: string; port: number; entry: string; policyIds: string[] }
  | { effect: 'deny'; host: string; port: number; rule: EgressRule; reason: string; policyIds?: string[] };

export interface ConnectEvaluation {
  decision: ConnectDecision;
  verdicts: StageVerdict[];
}

export interface ConnectInput {
  request: ConnectRequest;
  rules: EgressRules;
  session: SessionFacts;
  policy: PolicyEngine;
  /** ms since the epoch. */
  now: number;
  /**
   * Only a net.connect forbid refuses; a missing permit does not. For http.request, whose own Cedar action
   * already had to be permitted: a rule forbidding a host covers both ways out, without every tenant policy
   * having to permit net.connect as well. Default false (the proxy: a permit is needed).
   */
  forbidsOnly?: boolean;
}

const MS_PER_HOUR = 3_600_000;

function hostPort(host: string, port: number): string {
  return `${host}:${port}`;
}

/** The sentence every refusal ends with: what an operator runs to allow it. */
function howToAllow(rule: EgressRule, session: string, host: string, port: number, range?: string): string {
  switch (rule) {
    case 'allow-list':
      return `an operator allows it with: berth gate set ${session} --egress-allow ${DEFAULT_EGRESS_PORTS.includes(port) ? host : hostPort(host, port)} (the flag replaces the list: repeat the hosts already allowed)`;
    case 'address-range':
      return `an operator allows the range with: berth gate set ${session} --egress-allow-cidr ${range ?? 'CIDR'}`;
    case 'policy':
      return 'an operator must change the tenant policy (berth policy set) to permit it';
    case 'bad-request':
      return 'send a CONNECT host:port request or an absolute-URI http:// request to the proxy';
    case 'quota':
      return 'root raises the tenant quota with: berth tenant set TENANT --max-egress-gb N';
  }
}

/**
 * Stages 1 and 2 of a new connection (allow-list, Cedar). Pure; no name is resolved here, so a refused host
 * is not even looked up.
 */
export function evaluateConnect(input: ConnectInput): ConnectEvaluation {
  const { session, policy, now } = input;
  const host = normalizeHost(input.request.host);
  const port = input.request.port;
  const method = input.request.method;
  const verdicts: StageVerdict[] = [];
  const data = { host, port, ...(method ? { method } : {}) };
  const deny = (rule: EgressRule, why: string, detail: string, extra: Record<string, unknown> = {}, policyIds?: string[]): ConnectEvaluation => {
    const reason = `connection to ${hostPort(host, port)} refused by Berth egress (rule: ${rule}): ${why}; ${howToAllow(rule, session.id, host, port)}`;
    verdicts.push({ stage: rule === 'policy' ? 'policy' : 'arguments', verdict: 'deny', code: 'policy_denied', detail, data: { ...data, rule, ...extra } });
    return { decision: { effect: 'deny', host, port, rule, reason, ...(policyIds ? { policyIds } : {}) }, verdicts };
  };
  if (!Number.isInteger(port) || port < 1 || port > 65535 || host === '' || (!parseIp(host) && !NAME_RE.test(host))) {
    return deny('bad-request', `${JSON.stringify(input.request.host)} port ${port} is not a valid destination`, 'invalid destination');
  }
  const entry = matchEgressAllow(host, port, input.rules.allow);
  if (entry === null) {
    const list = input.rules.allow.length ? `this session may reach only ${input.rules.allow.join(', ')}` : 'this session may not reach any host (its egress allow-list is empty)';
    return deny('allow-list', `${hostPort(host, port)} is not on the session's egress allow-list: ${list}`, 'host not on the egress allow-list');
  }
  const res: AuthorizeResult = policy.authorize({
    sessionId: session.id,
    tenantId: session.tenantId,
    metadata: session.metadata,
    tool: NET_CONNECT,
    risk: 'write',
    args: { host, port, ...(method ? { method } : {}) },
    hourUtc: Math.floor(now / MS_PER_HOUR) % 24,
    callsInSession: session.callsInSession,
  });
  const noPermitOnly = res.decision === 'deny' && res.reasons.length === 0 && res.errors.length === 0;
  if (res.decision === 'deny' && !(input.forbidsOnly && noPermitOnly)) {
    const forbids = res.reasons.map((id) => {
      const why = policy.policy(id)?.annotations.reason;
      return `policy ${JSON.stringify(id)}${why ? ` (${why})` : ''}`;
    });
    const why = forbids.length ? `it is forbidden by ${forbids.join(', ')}` : res.errors.length ? `the policy could not be evaluated (${res.errors.join('; ')})` : 'no policy permits net.connect';
    return deny('policy', why, res.reasons.length ? 'forbidden by policy' : 'no permit matched', { policyIds: res.reasons }, res.reasons);
  }
  verdicts.push({ stage: 'arguments', verdict: 'pass', detail: `allowed by egress entry ${entry}`, data: { ...data, entry } });
  verdicts.push({ stage: 'policy', verdict: 'pass', detail: 'permitted', data: { policyIds: res.reasons } });
  return { decision: { effect: 'allow', host, port, entry, policyIds: res.reasons }, verdicts };
}

export type AddressCheck = { ok: true; address: string; family: 4 | 6 } | { ok: false; rule: 'address-range'; range: string | null; reason: string };

/**
 * Stage 3: the first resolved address that may be connected to. An address in a restricted range passes
 * only inside an operator's CIDR. The engine must connect to `address` and nothing else.
 */
export function checkAddresses(input: { sessionId: string; host: string; port: number; addresses: readonly string[]; cidrs: readonly string[] }): AddressCheck {
  const allowed = input.cidrs.map((c) => parseCidr(c)).filter((c): c is Cidr => c !== null);
  let firstRange: string | null = null;
  for (const a of input.addresses) {
    const ip = parseIp(a);
    if (!ip) continue;
    const range = restrictedRange(ip);
    if (range === null || allowed.some((c) => inCidr(ip, c))) return { ok: true, address: a, family: ip.v };
    firstRange ??= range;
  }
  const host = normalizeHost(input.host);
  const why = firstRange
    ? `${host} resolves to ${input.addresses.join(', ')}, in the restricted range ${firstRange} (loopback, private, link-local and metadata ranges are refused)`
    : `${host} did not resolve to any address`;
  return {
    ok: false,
    rule: 'address-range',
    range: firstRange,
    reason: `connection to ${hostPort(host, input.port)} refused by Berth egress (rule: address-range): ${why}; ${howToAllow('address-range', input.sessionId, host, input.port, firstRange ?? undefined)}`,
  };
}

export type HostCheck = { ok: true; host: string } | { ok: false; host: string | null; reason: string };

/** Whether an http(s) URL's host and port are on the egress allow-list (the rule of matchEgressAllow). */
export function checkHost(url: string, allow: readonly string[]): HostCheck {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { ok: false, host: null, reason: `${JSON.stringify(url)} is not a valid URL` };
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return { ok: false, host: null, reason: 'only http and https URLs can be requested' };
  const hostname = normalizeHost(u.hostname);
  const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
  const host = u.port ? `${hostname}:${port}` : hostname;
  if (matchEgressAllow(hostname, port, allow) !== null) return { ok: true, host };
  const allowed = allow.length ? `this session may reach only ${allow.join(', ')}` : 'this session may not reach any host (its egress allow-list is empty)';
  return {
    ok: false,
    host,
    reason: `host ${host} is not on the session's egress allow-list: ${allowed}; an operator allows it with: berth gate set SESSION --egress-allow ${DEFAULT_EGRESS_PORTS.includes(port) ? hostname : `${hostname}:${port}`}`,
  };
}
