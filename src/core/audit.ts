import { canonicalJson, sha256Hex } from './canonical.js';

/**
 * 'anonymous' appears only in audit entries: a request whose bearer token was not accepted. 'watcher' is a
 * viewer through a watch-only link (engine/watch-links.ts): `id` is the one session it may read, like an
 * agent's, and it may change nothing.
 */
export type PrincipalKind = 'root' | 'operator' | 'agent' | 'system' | 'anonymous' | 'watcher';
export interface Principal {
  kind: PrincipalKind;
  /** Tenant id for operators, session id for agents and watchers, 'root' or 'system'. */
  id: string;
  tenantId: string | null;
}

export interface AuditInput {
  tenantId: string | null;
  sessionId: string | null;
  principal: Principal;
  /** Dotted verb, e.g. 'session.create', 'tool.call', 'gate.policy', 'approval.decide'. */
  action: string;
  /** 'ok' | 'deny' | 'error' | 'pending' | ... */
  outcome: string;
  data: Record<string, unknown>;
}

export interface AuditEntry extends AuditInput {
  /** 1, 2, 3 … with no gaps. */
  seq: number;
  ts: number;
  /** Hash of the previous entry ('0'*64 for the first). */
  prevHash: string;
  /** SHA-256 of this entry's canonical JSON body (every field but `hash`). */
  hash: string;
}

export const GENESIS_HASH = '0'.repeat(64);

export function hashEntry(e: Omit<AuditEntry, 'hash'>): string {
  const body = {
    seq: e.seq,
    ts: e.ts,
    tenantId: e.tenantId,
    sessionId: e.sessionId,
    principal: e.principal,
    action: e.action,
    outcome: e.outcome,
    data: e.data,
    prevHash: e.prevHash,
  };
  return sha256Hex(canonicalJson(body));
}

export interface AuditQuery {
  tenantId?: string;
  sessionId?: string;
  afterSeq?: number;
  limit?: number;
}

/**
 * The AuditLog port: append-only by construction, no update or delete. Calls made inside the store's
 * transaction() are part of it (an appended entry commits or rolls back with it).
 */
export interface AuditLog {
  append(input: AuditInput): Promise<AuditEntry>;
  query(q?: AuditQuery): Promise<AuditEntry[]>;
  /** Every entry in seq order, as stored, for verification. */
  scan(): AsyncIterable<AuditEntry>;
}

export type VerifyResult =
  | { ok: true; entries: number; headHash: string }
  | { ok: false; entries: number; firstBadSeq: number; problem: 'edited' | 'removed' | 'reordered' | 'broken_link' };

/**
 * Checks entries one at a time, in seq order; the first failure is final. Shared by verifyChain (over an
 * array or any iterable) and verifyChainAsync (over AuditLog.scan()).
 */
export class ChainChecker {
  #prev = GENESIS_HASH;
  #expectSeq = 1;
  #n = 0;
  #failed: VerifyResult | undefined;

  /** Feeds one entry; returns the failure when this entry is the first bad one (or one already was). */
  push(e: AuditEntry): VerifyResult | undefined {
    if (this.#failed) return this.#failed;
    this.#n++;
    const n = this.#n;
    if (e.seq !== this.#expectSeq) {
      return (this.#failed = { ok: false, entries: n, firstBadSeq: this.#expectSeq, problem: e.seq > this.#expectSeq ? 'removed' : 'reordered' });
    }
    const { hash, ...rest } = e;
    let computed: string;
    try {
      computed = hashEntry(rest);
    } catch {
      computed = ''; // a value JSON cannot carry (e.g. a hand-written 1e999) was put in by hand
    }
    if (computed !== hash) return (this.#failed = { ok: false, entries: n, firstBadSeq: e.seq, problem: 'edited' });
    if (e.prevHash !== this.#prev) return (this.#failed = { ok: false, entries: n, firstBadSeq: e.seq, problem: 'broken_link' });
    this.#prev = hash;
    this.#expectSeq++;
    return undefined;
  }

  result(): VerifyResult {
    return this.#failed ?? { ok: true, entries: this.#n, headHash: this.#prev };
  }
}

/**
 * Walks the chain in one pass (entries in seq order, as stored) and names the first entry that was
 * edited, removed or reordered. `entries` in the result counts the entries read.
 */
export function verifyChain(entries: Iterable<AuditEntry>): VerifyResult {
  const c = new ChainChecker();
  for (const e of entries) if (c.push(e)) break;
  return c.result();
}

/** verifyChain over an async source such as AuditLog.scan(); stops reading at the first bad entry. */
export async function verifyChainAsync(entries: AsyncIterable<AuditEntry> | Iterable<AuditEntry>): Promise<VerifyResult> {
  const c = new ChainChecker();
  for await (const e of entries) if (c.push(e)) break;
  return c.result();
}
