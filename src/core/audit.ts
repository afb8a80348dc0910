import { canonicalJson, sha256Hex } from './canonical.js';

export type PrincipalKind = 'root' | 'operator' | 'agent' | 'system';
export interface Principal {
  kind: PrincipalKind;
  /** Tenant id for operators, session id for agents, 'root' or 'system'. */
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

/** The AuditLog port: append-only by construction, no update or delete. */
export interface AuditLog {
  append(input: AuditInput): AuditEntry;
  query(q?: AuditQuery): AuditEntry[];
  /** Every entry in seq order, as stored, for verification. */
  scan(): Iterable<AuditEntry>;
}

export type VerifyResult =
  | { ok: true; entries: number; headHash: string }
  | { ok: false; entries: number; firstBadSeq: number; problem: 'edited' | 'removed' | 'reordered' | 'broken_link' };

/**
 * Walks the chain in one pass (entries in seq order, as stored) and names the first entry that was
 * edited, removed or reordered. `entries` in the result counts the entries read.
 */
export function verifyChain(entries: Iterable<AuditEntry>): VerifyResult {
  let prev = GENESIS_HASH;
  let expectSeq = 1;
  let n = 0;
  for (const e of entries) {
    n++;
    if (e.seq !== expectSeq) {
      return { ok: false, entries: n, firstBadSeq: expectSeq, problem: e.seq > expectSeq ? 'removed' : 'reordered' };
    }
    const { hash, ...rest } = e;
    let computed: string;
    try {
      computed = hashEntry(rest);
    } catch {
      computed = ''; // a value JSON cannot carry (e.g. a hand-written 1e999) was put in by hand
    }
    if (computed !== hash) return { ok: false, entries: n, firstBadSeq: e.seq, problem: 'edited' };
    if (e.prevHash !== prev) return { ok: false, entries: n, firstBadSeq: e.seq, problem: 'broken_link' };
    prev = hash;
    expectSeq++;
  }
  return { ok: true, entries: n, headHash: prev };
}
