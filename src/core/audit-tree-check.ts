/**
 * What every store's audit tree does the same way, whatever holds its rows (SQLite, PostgreSQL): a stored
 * row's leaf, the tree recomputed from the rows, the stored leaves compared with it, the verdict on each
 * signed head, and the bounds of proof requests. Pure: the stores read rows and nodes and hand them here,
 * so the two backends cannot drift in what they call tampered.
 */
import type { KeyObject } from 'node:crypto';
import { entryLeafText, verifyHeadSignature, type CheckpointCheck, type RowsAndLeaves, type SignedHead, type StoredEntryParts, type TreeVerifyResult } from './audit-tree.js';
import { AppError, InvalidArgumentError, NotFoundError } from './errors.js';
import { MemoryTree, consistencyProof, inclusionProof, leafHash, rootOf, verifyConsistency, type NodeReader } from './merkle.js';

/** An `audit` row as both stores return it: column names, values as stored (JSON columns as raw text). */
export interface StoredAuditRow {
  seq: unknown;
  ts: unknown;
  tenant_id: unknown;
  session_id: unknown;
  principal: unknown;
  action: unknown;
  outcome: unknown;
  data: unknown;
  prev_hash: unknown;
  hash: unknown;
}

/** The columns of StoredAuditRow, in that order, for SELECTs. */
export const STORED_AUDIT_COLUMNS = 'seq, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash';

/** The `audit_signed_head` row, as both stores keep it (one row, replaced with every appending transaction). */
export interface SignedHeadRow {
  tree_size: number;
  root_hash: string;
  ts: number;
  key_id: string;
  signature: string;
}

export const SIGNED_HEAD_COLUMNS = 'tree_size, root_hash, ts, key_id, signature';

export function headOfRow(r: SignedHeadRow): SignedHead {
  return { treeSize: r.tree_size, rootHash: r.root_hash, timestamp: r.ts, keyId: r.key_id, signature: r.signature };
}

/** The entry `--accept-audit-rollback` appends (src/store/audit-key.ts). */
export const ROLLBACK_ACTION = 'audit.rollback_accepted';
/** Its principal as stored (canonical JSON): a rollback entry is recognized by both columns. */
const SYSTEM_PRINCIPAL_JSON = '{"id":"system","kind":"system","tenantId":null}';

export function partsOfRow(r: StoredAuditRow): StoredEntryParts {
  return {
    seq: r.seq,
    ts: r.ts,
    tenantId: r.tenant_id,
    sessionId: r.session_id,
    principalJson: r.principal,
    action: r.action,
    outcome: r.outcome,
    dataJson: r.data,
    prevHash: r.prev_hash,
    hash: r.hash,
  };
}

/** The leaf hash of a stored row: over its exact stored bytes (entryLeafText), never a re-parse. */
export function leafOfRow(r: StoredAuditRow): Buffer {
  return leafHash(Buffer.from(entryLeafText(partsOfRow(r)), 'utf8'));
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** Builds the tree from the rows as they are stored, fed in seq order; notes accepted rollbacks on the way. */
export class TreeRecompute {
  readonly #leaves: Buffer[] = [];
  /** Seqs of `audit.rollback_accepted` entries written by the system. */
  readonly rollbacks: number[] = [];
  #tree: MemoryTree | undefined;

  push(r: StoredAuditRow): void {
    if (this.#tree !== undefined) throw new AppError('internal', 'TreeRecompute: push() after tree()');
    this.#leaves.push(leafOfRow(r));
    if (r.action === ROLLBACK_ACTION && r.principal === SYSTEM_PRINCIPAL_JSON) this.rollbacks.push(this.#leaves.length);
  }

  /** The recomputed tree; built once, on the first call, after the last push(). */
  tree(): MemoryTree {
    if (this.#tree === undefined) {
      const n = this.#leaves.length;
      this.#tree = new MemoryTree(n, Buffer.concat(this.#leaves, n * 32));
      this.#leaves.length = 0; // the tree holds them now
    }
    return this.#tree;
  }
}

/** Compares the stored leaves, fed in idx order, with a recomputed tree: finds the first that differs. */
export class StoredLeafCheck {
  #expect = 0;
  #bad = false;
  constructor(private readonly mem: MemoryTree) {}

  /** False once a difference is found (stop feeding). */
  push(idx: number, hash: Uint8Array): boolean {
    if (this.#bad) return false;
    if (idx !== this.#expect || this.#expect >= this.mem.size || !Buffer.from(hash).equals(this.mem.leaf(this.#expect))) {
      this.#bad = true;
      return false;
    }
    this.#expect++;
    return true;
  }

  /** The first leaf (0-based) where the stored tree and the recomputed one differ, or -1. */
  firstMismatch(): number {
    return this.#bad || this.#expect !== this.mem.size ? this.#expect : -1;
  }
}

/** What a store gathered, in one consistent view, for judgeTree(). */
export interface TreeEvidence {
  /** The tree recomputed from the rows. */
  recomputed: TreeRecompute;
  /** StoredLeafCheck.firstMismatch() over the stored leaves. */
  storedMismatch: number;
  /** Leaves in the stored tree. */
  storedSize: number;
  /** Root (hex) of the first `size` stored leaves, from stored nodes; asked only for size ≤ storedSize. */
  storedRootAt(size: number): Promise<string>;
  /** The head the store signed with its newest append. */
  signed: SignedHead | undefined;
  /** A key is attached: the log must then carry a signed head (one that is missing is 'unsigned'). */
  keyed: boolean;
}

/** The result of `verify`: every checkpoint, and the head signed in the store, against the rows. */
export async function judgeTree(e: TreeEvidence, checkpoints: SignedHead[], publicKey: KeyObject): Promise<TreeVerifyResult> {
  const mem = e.recomputed.tree();
  const rollbacks = e.recomputed.rollbacks;
  const mismatch = e.storedMismatch;
  const root = await rootOf(mem, mem.size);
  const checks: CheckpointCheck[] = [];
  for (const cp of checkpoints) {
    const base = { treeSize: cp.treeSize, rootHash: cp.rootHash, timestamp: cp.timestamp, keyId: cp.keyId };
    if (!verifyHeadSignature(publicKey, cp)) {
      checks.push({ ...base, ok: false, problem: 'signature' });
      continue;
    }
    if (cp.treeSize > mem.size) {
      checks.push({ ...base, ok: false, problem: 'truncated', firstBadSeq: mem.size + 1 });
      continue;
    }
    const proof = await consistencyProof(mem, cp.treeSize, mem.size);
    if (verifyConsistency(cp.treeSize, mem.size, Buffer.from(cp.rootHash, 'hex'), root, proof)) {
      // Consistent, but an operator accepted a rollback since: what followed this head is not continuous.
      const rb = rollbacks.find((seq) => seq > cp.treeSize);
      checks.push(rb === undefined ? { ...base, ok: true, proof: proof.map(hex) } : { ...base, ok: false, problem: 'rollback', firstBadSeq: rb, proof: proof.map(hex) });
      continue;
    }
    // Which entry differs: known when the stored leaves still add up to the signed root (only rows edited).
    let firstBadSeq: number | undefined;
    if (mismatch >= 0 && mismatch < cp.treeSize && e.storedSize >= cp.treeSize && (await e.storedRootAt(cp.treeSize)) === cp.rootHash) {
      firstBadSeq = mismatch + 1;
    }
    checks.push({ ...base, ok: false, problem: 'rewritten', ...(firstBadSeq === undefined ? {} : { firstBadSeq }) });
  }
  // The head signed with the newest append must cover every row: a row added by hand carries no signature.
  let latest: CheckpointCheck | undefined;
  const signed = e.signed;
  if (e.keyed || signed !== undefined) {
    if (signed === undefined) {
      latest = { treeSize: 0, rootHash: '', timestamp: 0, keyId: '', ok: mem.size === 0, ...(mem.size === 0 ? {} : { problem: 'unsigned' as const, firstBadSeq: 1 }) };
    } else {
      const base = { treeSize: signed.treeSize, rootHash: signed.rootHash, timestamp: signed.timestamp, keyId: signed.keyId };
      if (!verifyHeadSignature(publicKey, signed)) latest = { ...base, ok: false, problem: 'signature' };
      else if (signed.treeSize > mem.size) latest = { ...base, ok: false, problem: 'truncated', firstBadSeq: mem.size + 1 };
      else if (signed.treeSize < mem.size) latest = { ...base, ok: false, problem: 'unsigned', firstBadSeq: signed.treeSize + 1 };
      else if (signed.rootHash !== hex(root)) latest = { ...base, ok: false, problem: 'rewritten', ...(mismatch >= 0 ? { firstBadSeq: mismatch + 1 } : {}) };
      else latest = { ...base, ok: true };
    }
  }
  return {
    ok: checks.every((c) => c.ok) && mismatch < 0 && (latest?.ok ?? true),
    ...(latest === undefined ? {} : { latestSigned: latest }),
    treeSize: mem.size,
    rootHash: hex(root),
    ...(mismatch < 0 ? {} : { storedTreeFirstBadSeq: mismatch + 1 }),
    checkpoints: checks,
  };
}

/** A stored tree as the proof requests read it: its size (leaves) and its perfect-subtree nodes. */
export interface StoredTreeView {
  size: number;
  nodes: NodeReader;
}

function checkSize(size: number, stored: number, field: string): void {
  if (!Number.isSafeInteger(size) || size < 0 || size > stored) {
    throw new InvalidArgumentError(`${field}: must be an integer 0..${stored} (the tree's size)`, { details: { field, treeSize: stored } });
  }
}

/** AuditTree.rootAt over a stored tree: hex root of its first `size` leaves. */
export async function storedRootAt(t: StoredTreeView, size: number): Promise<string> {
  checkSize(size, t.size, 'treeSize');
  return hex(await rootOf(t.nodes, size));
}

/** AuditTree.inclusionProof over a stored tree (hex, leaf side first). */
export async function storedInclusionProof(t: StoredTreeView, seq: number, treeSize: number): Promise<string[]> {
  checkSize(treeSize, t.size, 'treeSize');
  if (!Number.isSafeInteger(seq) || seq < 1 || seq > treeSize) throw new NotFoundError('audit entry', String(seq), { details: { treeSize } });
  return (await inclusionProof(t.nodes, seq - 1, treeSize)).map(hex);
}

/** AuditTree.consistencyProof over a stored tree (hex). */
export async function storedConsistencyProof(t: StoredTreeView, fromSize: number, toSize: number): Promise<string[]> {
  checkSize(toSize, t.size, 'to');
  if (!Number.isSafeInteger(fromSize) || fromSize < 0 || fromSize > toSize) {
    throw new InvalidArgumentError(`from: must be an integer 0..${toSize}`, { details: { field: 'from' } });
  }
  return (await consistencyProof(t.nodes, fromSize, toSize)).map(hex);
}

/** RowsAndLeaves from the counts, the last row and the stored leaf at its index (if any). */
export function rowsAndLeaves(rows: number, leaves: number, lastRow: StoredAuditRow | undefined, storedLeaf: Uint8Array | undefined): RowsAndLeaves {
  if (rows === 0 || leaves < rows) return { rows, leaves, lastLeafMatches: rows === 0 };
  const lastLeafMatches = lastRow !== undefined && storedLeaf !== undefined && Buffer.from(storedLeaf).equals(leafOfRow(lastRow));
  return { rows, leaves, lastLeafMatches };
}

/** The refusal to sign leaves this server cannot vouch for (added by hand under it). */
export function untrustedLeaves(treeSize: number, written: number): AppError {
  return new AppError('invalid_state', `the audit tree holds ${treeSize - written} leaf(s) this server did not write; refusing to sign them (run berth audit verify)`, {
    details: { treeSize, written },
  });
}
