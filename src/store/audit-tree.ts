/**
 * The audit log's Merkle tree (RFC 6962, core/merkle.ts) in SQLite: every perfect subtree hash in
 * `audit_tree`, append-only like the audit table, written in the same transaction as the entry it covers;
 * and the latest signed tree head in `audit_signed_head`, replaced in that same transaction, so no committed
 * entry is ever outside a signature (a row appended by hand is: verification and startup catch it).
 *
 * Verification never trusts the stored tree: it recomputes every leaf from the rows' stored bytes.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import type BetterSqlite3 from 'better-sqlite3';
import type { KeyObject } from 'node:crypto';
import {
  entryLeafText,
  parseSignedHead,
  verifyHeadSignature,
  type AuditTree,
  type CheckpointCheck,
  type HeadSigner,
  type SignedHead,
  type StoredEntryParts,
  type TreeVerifyResult,
} from '../core/audit-tree.js';
import { NotFoundError, AppError, InvalidArgumentError } from '../core/errors.js';
import type { TxScope } from './sqlite-tx.js';
import { MerkleFrontier, consistencyProof, inclusionProof, leafHash, nodeHash, rootOf, verifyConsistency, type NodeReader } from '../core/merkle.js';

const TREE_NO_DELETE = `CREATE TRIGGER audit_tree_no_delete BEFORE DELETE ON audit_tree
BEGIN SELECT RAISE(ABORT, 'audit_tree is append-only'); END;`;

export const V4_AUDIT_TREE = `
-- Perfect subtree hashes: level 0 holds leaf hashes (idx = seq - 1); node (l, i) covers leaves [i*2^l, (i+1)*2^l).
CREATE TABLE audit_tree (
  level INTEGER NOT NULL,
  idx INTEGER NOT NULL,
  hash BLOB NOT NULL,
  PRIMARY KEY (level, idx)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER audit_tree_no_update BEFORE UPDATE ON audit_tree
BEGIN SELECT RAISE(ABORT, 'audit_tree is append-only'); END;
CREATE TRIGGER audit_tree_no_delete BEFORE DELETE ON audit_tree
BEGIN SELECT RAISE(ABORT, 'audit_tree is append-only'); END;
-- INSERT OR REPLACE deletes without firing the DELETE trigger: refuse any insert over an existing node.
CREATE TRIGGER audit_tree_no_replace BEFORE INSERT ON audit_tree
WHEN EXISTS (SELECT 1 FROM audit_tree WHERE level = NEW.level AND idx = NEW.idx)
BEGIN SELECT RAISE(ABORT, 'audit_tree is append-only'); END;

-- The newest signed head (one row), replaced with every append.
CREATE TABLE audit_signed_head (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  tree_size INTEGER NOT NULL,
  root_hash TEXT NOT NULL,
  ts INTEGER NOT NULL,
  key_id TEXT NOT NULL,
  signature TEXT NOT NULL
) STRICT;
`;

interface RawRow {
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

/** The entry `--accept-audit-rollback` appends (src/store/audit-key.ts), as stored. */
export const ROLLBACK_ACTION = 'audit.rollback_accepted';
const SYSTEM_JSON = '{"id":"system","kind":"system","tenantId":null}';

const RAW_COLUMNS = 'seq, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash';

export function partsOfRow(r: RawRow): StoredEntryParts {
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

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** A tree held in memory as one buffer per level (32 bytes a node): 64 MB at 10^6 leaves. */
class MemoryTree implements NodeReader {
  readonly levels: Buffer[];
  constructor(readonly size: number, leaves: Buffer) {
    this.levels = [leaves];
    let prev = leaves;
    for (let n = Math.floor(size / 2); n >= 1; n = Math.floor(n / 2)) {
      const next = Buffer.allocUnsafe(n * 32);
      for (let i = 0; i < n; i++) nodeHash(prev.subarray(64 * i, 64 * i + 32), prev.subarray(64 * i + 32, 64 * i + 64)).copy(next, 32 * i);
      this.levels.push(next);
      prev = next;
    }
  }
  async node(level: number, index: number): Promise<Uint8Array> {
    return this.nodeSync(level, index);
  }
  nodeSync(level: number, index: number): Uint8Array {
    const l = this.levels[level];
    if (l === undefined || (index + 1) * 32 > l.length) throw new RangeError(`no node (${level}, ${index})`);
    return l.subarray(32 * index, 32 * index + 32);
  }
  leaf(i: number): Buffer {
    return (this.levels[0] as Buffer).subarray(32 * i, 32 * i + 32);
  }
}

export interface SqliteAuditTreeOptions {
  db: BetterSqlite3.Database;
  /** The store's connection scope: reads and signing wait for an open transaction held elsewhere. */
  scope?: TxScope;
}

/** Built by SqliteAuditLog; reached as `store.audit.tree`. */
export class SqliteAuditTree implements AuditTree {
  readonly #db: BetterSqlite3.Database;
  readonly #node: BetterSqlite3.Statement<[number, number], { hash: Buffer }>;
  readonly #insertNode: BetterSqlite3.Statement<[number, number, Buffer]>;
  readonly #leafCount: BetterSqlite3.Statement<[], { n: number | null }>;
  readonly #maxSeq: BetterSqlite3.Statement<[], { n: number | null }>;
  readonly #row: BetterSqlite3.Statement<[number], RawRow>;
  readonly #rows: BetterSqlite3.Statement<[], RawRow>;
  readonly #rowsAfter: BetterSqlite3.Statement<[number], RawRow>;
  readonly #leaves: BetterSqlite3.Statement<[], { idx: number; hash: Buffer }>;
  readonly #signedHead: BetterSqlite3.Statement<[], { tree_size: number; root_hash: string; ts: number; key_id: string; signature: string }>;
  readonly #putHead: BetterSqlite3.Statement<unknown[]>;
  readonly #scope: TxScope | undefined;
  #frontier: MerkleFrontier;
  #signer: HeadSigner | undefined;
  #ledgerPath: string | undefined;
  /** The tree size last written to the ledger (it never moves backwards). */
  #ledgerSize = 0;
  /**
   * The tree size this process knows it wrote or found verified at start. Leaves beyond it that it did not
   * add (rows and leaves inserted by hand under a running server) are never covered by a signature.
   */
  #trusted = 0;
  /** An append inside an outer transaction left the head unsigned: the timestamp to sign it with at COMMIT. */
  #signAt: number | undefined;

  constructor(opts: SqliteAuditTreeOptions) {
    const db = (this.#db = opts.db);
    this.#scope = opts.scope;
    this.#node = db.prepare('SELECT hash FROM audit_tree WHERE level = ? AND idx = ?');
    this.#insertNode = db.prepare('INSERT INTO audit_tree (level, idx, hash) VALUES (?, ?, ?)');
    this.#leafCount = db.prepare('SELECT max(idx) + 1 AS n FROM audit_tree WHERE level = 0');
    this.#maxSeq = db.prepare('SELECT max(seq) AS n FROM audit');
    this.#row = db.prepare(`SELECT ${RAW_COLUMNS} FROM audit WHERE seq = ?`);
    this.#rows = db.prepare(`SELECT ${RAW_COLUMNS} FROM audit ORDER BY seq`);
    this.#rowsAfter = db.prepare(`SELECT ${RAW_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq`);
    this.#leaves = db.prepare('SELECT idx, hash FROM audit_tree WHERE level = 0 ORDER BY idx');
    this.#signedHead = db.prepare('SELECT tree_size, root_hash, ts, key_id, signature FROM audit_signed_head WHERE id = 1');
    this.#putHead = db.prepare(
      `INSERT INTO audit_signed_head (id, tree_size, root_hash, ts, key_id, signature) VALUES (1, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET tree_size = excluded.tree_size, root_hash = excluded.root_hash, ts = excluded.ts,
       key_id = excluded.key_id, signature = excluded.signature`,
    );
    this.#frontier = this.#load();
    this.#backfill();
  }

  /** Runs fn with the connection to itself (not inside another caller's open transaction). */
  async #exclusive<T>(fn: () => Promise<T> | T): Promise<T> {
    const scope = this.#scope;
    if (scope === undefined || scope.current()) return fn();
    await scope.lock.acquire();
    try {
      return await fn();
    } finally {
      scope.lock.release();
    }
  }

  /**
   * Signs a head with every append from now on (the server attaches its key before it serves), and after
   * each commit records that head in `ledgerPath`, a file beside the key, outside the data directory.
   */
  attachSigner(signer: HeadSigner, opts: { ledgerPath?: string } = {}): void {
    this.#signer = signer;
    this.#ledgerPath = opts.ledgerPath;
    this.#trusted = this.#load().treeSize; // the start check that follows refuses an unsigned tail
  }

  /** After a committed append: the signed head to the ledger file (never backwards). */
  afterCommit(): void {
    this.record(this.committedHead());
  }

  /** The newest signed head. Call only when no transaction is open (on this connection it would read uncommitted rows). */
  committedHead(): SignedHead | undefined {
    return this.#signedHeadSync();
  }

  /** A committed head, once the entries it covers are on disk, to the ledger file (never backwards). */
  record(h: SignedHead | undefined): void {
    if (this.#ledgerPath === undefined) return;
    if (h === undefined || h.treeSize < this.#ledgerSize) return;
    try {
      writeLedger(this.#ledgerPath, h);
    } catch (e) {
      throw new AppError('unavailable', 'audit entry committed but the signed head could not be recorded', {
        details: { treeSize: h.treeSize, path: this.#ledgerPath, committed: true },
        cause: e,
      });
    }
    this.#ledgerSize = h.treeSize;
  }

  /** Rows in the audit table (its last seq) and whether the last row's leaf is the stored one. */
  rowsAndLastLeaf(): { rows: number; leaves: number; lastLeafMatches: boolean } {
    const rows = this.#maxSeq.get()?.n ?? 0;
    const leaves = this.#load().treeSize;
    if (rows === 0 || leaves < rows) return { rows, leaves, lastLeafMatches: rows === 0 };
    const r = this.#row.get(rows);
    const stored = this.#node.get(0, rows - 1)?.hash;
    const lastLeafMatches = r !== undefined && stored !== undefined && stored.equals(leafHash(Buffer.from(entryLeafText(partsOfRow(r)), 'utf8')));
    return { rows, leaves, lastLeafMatches };
  }

  /**
   * Operator-accepted recovery (`--accept-audit-rollback`): the tree is rebuilt from the rows as they stand
   * and signed. The only code that deletes from audit_tree; the caller records that it ran.
   */
  rebuild(timestamp: number): SignedHead | undefined {
    const mem = this.#recompute();
    this.#db.transaction(() => {
      this.#db.exec('DROP TRIGGER audit_tree_no_delete; DELETE FROM audit_tree;');
      this.#db.exec(TREE_NO_DELETE);
      for (let level = 0; level < mem.levels.length; level++) {
        const n = (mem.levels[level] as Buffer).length / 32;
        for (let i = 0; i < n; i++) this.#insertNode.run(level, i, Buffer.from(mem.nodeSync(level, i)));
      }
    }).immediate();
    this.#frontier = this.#load();
    this.#ledgerSize = 0;
    this.#trusted = this.#frontier.treeSize;
    return this.#signer === undefined ? undefined : this.signNowSync(timestamp);
  }

  get signer(): HeadSigner | undefined {
    return this.#signer;
  }

  #load(): MerkleFrontier {
    const size = this.#leafCount.get()?.n ?? 0;
    return MerkleFrontier.loadSync(size, (l, i) => this.#nodeSync(l, i));
  }

  #nodeSync(level: number, index: number): Buffer {
    const row = this.#node.get(level, index);
    if (row === undefined) throw new AppError('internal', `audit tree node (${level}, ${index}) is missing`, { details: { level, index } });
    return row.hash;
  }

  /** Rows written before the tree existed (schema 3) get their leaves now, in one transaction. */
  #backfill(): void {
    const after = this.#frontier.treeSize;
    const missing = this.#rowsAfter.all(after);
    if (missing.length === 0) return;
    this.#db.transaction(() => {
      for (const r of missing) if (!this.#add(entryLeafText(partsOfRow(r)), r.seq as number)) break;
    })();
  }

  /** False when the leaf could not be added because rows and tree disagree (rows cut or added by hand). */
  #add(text: string, seq: number): boolean {
    if (this.#frontier.treeSize !== seq - 1) this.#frontier = this.#load(); // a rolled-back append moved it
    // Rows and tree disagree: someone cut or added rows under us. The tree is left as found (evidence, like
    // a frozen anchor) and the entry goes unsigned, so verification reports it.
    if (this.#frontier.treeSize !== seq - 1) return false;
    // The stored tree grew past what this process wrote: someone appended leaves by hand. Signing now would
    // cover their rows, so this entry (and every later one) goes unsigned and verification names the first.
    if (this.#signer !== undefined && this.#frontier.treeSize > this.#trusted) return false;
    for (const n of this.#frontier.append(Buffer.from(text, 'utf8'))) this.#insertNode.run(n.level, n.index, n.hash);
    return true;
  }

  /**
   * Called by SqliteAuditLog inside the append transaction, after the row's INSERT: adds the leaf and, with
   * a signer, replaces the signed head, so both commit (or roll back) with the row.
   */
  onAppend(parts: StoredEntryParts & { seq: number; ts: number }, opts: { inOuterTransaction?: boolean } = {}): void {
    if (!this.#add(entryLeafText(parts), parts.seq) || this.#signer === undefined) return;
    this.#trusted = this.#frontier.treeSize; // written by this process
    // Inside a store transaction (a gated call's verdicts: five appends), one head is signed at its end.
    if (opts.inOuterTransaction) {
      this.#signAt = parts.ts;
      return;
    }
    this.#sign(this.#frontier, parts.ts);
  }

  /** Called by the store just before its outermost COMMIT: signs the head its appends made, once. */
  beforeCommit(): void {
    const ts = this.#signAt;
    this.#signAt = undefined;
    if (ts === undefined || this.#signer === undefined) return;
    const f = this.#load(); // a savepoint may have undone the last append since the frontier moved
    this.#frontier = f;
    if (f.treeSize > this.#trusted) return; // leaves this process did not write: left unsigned, as in #add
    this.#sign(f, ts);
  }

  #sign(f: MerkleFrontier, timestamp: number): void {
    const h = (this.#signer as HeadSigner).sign({ treeSize: f.treeSize, rootHash: f.root().toString('hex'), timestamp });
    this.#putHead.run(h.treeSize, h.rootHash, h.timestamp, h.keyId, h.signature);
  }

  /** Called when the caller's transaction rolled back: the frontier is reloaded on the next append. */
  afterRollback(): void {
    this.#signAt = undefined;
    this.#frontier = this.#load();
    this.#trusted = Math.min(this.#trusted, this.#frontier.treeSize);
  }

  /** The head signed with the newest committed append, if a signer was attached by then. */
  async signedHead(): Promise<SignedHead | undefined> {
    return this.#exclusive(() => this.#signedHeadSync());
  }

  #signedHeadSync(): SignedHead | undefined {
    const r = this.#signedHead.get();
    return r && { treeSize: r.tree_size, rootHash: r.root_hash, timestamp: r.ts, keyId: r.key_id, signature: r.signature };
  }

  /** Signs the current head now, with a fresh timestamp (a checkpoint; or a first head for an old log). */
  async signNow(timestamp: number): Promise<SignedHead> {
    return this.#exclusive(() => {
      const h = this.signNowSync(timestamp);
      this.afterCommit();
      return h;
    });
  }

  signNowSync(timestamp: number): SignedHead {
    if (this.#signer === undefined) throw new AppError('unavailable', 'no audit key is attached');
    const signer = this.#signer;
    return this.#db.transaction(() => {
      const f = this.#load();
      if (f.treeSize > this.#trusted) {
        throw new AppError('invalid_state', `the audit tree holds ${f.treeSize - this.#trusted} leaf(s) this server did not write; refusing to sign them (run berth audit verify)`, {
          details: { treeSize: f.treeSize, written: this.#trusted },
        });
      }
      const h = signer.sign({ treeSize: f.treeSize, rootHash: f.root().toString('hex'), timestamp });
      this.#putHead.run(h.treeSize, h.rootHash, h.timestamp, h.keyId, h.signature);
      return h;
    }).immediate();
  }

  async head(): Promise<{ treeSize: number; rootHash: string }> {
    return this.#exclusive(() => {
      const f = this.#load();
      return { treeSize: f.treeSize, rootHash: f.root().toString('hex') };
    });
  }

  #reader(): NodeReader {
    return { node: async (l, i) => this.#nodeSync(l, i) };
  }

  #checkSize(size: number, field: string): void {
    const n = this.#load().treeSize;
    if (!Number.isSafeInteger(size) || size < 0 || size > n) {
      throw new InvalidArgumentError(`${field}: must be an integer 0..${n} (the tree's size)`, { details: { field, treeSize: n } });
    }
  }

  async rootAt(size: number): Promise<string> {
    return this.#exclusive(async () => {
      this.#checkSize(size, 'treeSize');
      return hex(await rootOf(this.#reader(), size));
    });
  }

  async entry(seq: number): Promise<{ text: string; tenantId: string | null } | undefined> {
    return this.#exclusive(async () => {
      const r = this.#row.get(seq);
      return r && { text: entryLeafText(partsOfRow(r)), tenantId: typeof r.tenant_id === 'string' ? r.tenant_id : null };
    });
  }

  async inclusionProof(seq: number, treeSize: number): Promise<string[]> {
    return this.#exclusive(async () => {
      this.#checkSize(treeSize, 'treeSize');
      if (!Number.isSafeInteger(seq) || seq < 1 || seq > treeSize) throw new NotFoundError('audit entry', String(seq), { details: { treeSize } });
      return (await inclusionProof(this.#reader(), seq - 1, treeSize)).map(hex);
    });
  }

  async consistencyProof(fromSize: number, toSize: number): Promise<string[]> {
    return this.#exclusive(async () => {
      this.#checkSize(toSize, 'to');
      if (!Number.isSafeInteger(fromSize) || fromSize < 0 || fromSize > toSize) {
        throw new InvalidArgumentError(`from: must be an integer 0..${toSize}`, { details: { field: 'from' } });
      }
      return (await consistencyProof(this.#reader(), fromSize, toSize)).map(hex);
    });
  }

  /** Every leaf recomputed from the rows as they are stored now. */
  #recompute(rollbacks: number[] = []): MemoryTree {
    const rows: Buffer[] = [];
    for (const r of this.#rows.iterate()) {
      rows.push(leafHash(Buffer.from(entryLeafText(partsOfRow(r)), 'utf8')));
      if (r.action === ROLLBACK_ACTION && r.principal === SYSTEM_JSON) rollbacks.push(rows.length);
    }
    return new MemoryTree(rows.length, Buffer.concat(rows, rows.length * 32));
  }

  /** The first leaf (0-based) where the stored tree and the recomputed one differ, or -1. */
  #firstStoredMismatch(mem: MemoryTree): number {
    let expect = 0;
    for (const { idx, hash } of this.#leaves.iterate()) {
      if (idx !== expect || expect >= mem.size || !hash.equals(mem.leaf(expect))) return expect;
      expect++;
    }
    return expect === mem.size ? -1 : expect;
  }

  async verify(checkpoints: SignedHead[], publicKey: KeyObject): Promise<TreeVerifyResult> {
    return this.#exclusive(async () => {
      const rollbacks: number[] = [];
      const mem = this.#recompute(rollbacks);
      const root = await rootOf(mem, mem.size);
      const mismatch = this.#firstStoredMismatch(mem);
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
        const stored = this.#load().treeSize;
        if (mismatch >= 0 && mismatch < cp.treeSize && stored >= cp.treeSize && hex(await rootOf(this.#reader(), cp.treeSize)) === cp.rootHash) {
          firstBadSeq = mismatch + 1;
        }
        checks.push({ ...base, ok: false, problem: 'rewritten', ...(firstBadSeq === undefined ? {} : { firstBadSeq }) });
      }
      // The head signed with the newest append must cover every row: a row added by hand carries no signature.
      let latest: CheckpointCheck | undefined;
      const signed = this.#signedHeadSync();
      if (this.#signer !== undefined || signed !== undefined) {
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
    });
  }
}

/** The last signed head, recorded outside the database; undefined when there is no file yet. */
export function readLedger(path: string): SignedHead | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = undefined;
  }
  return parseSignedHead(v, path);
}

/**
 * tmp + rename. No fsync, as for the anchor: the database commit before it was fsynced, so after a power
 * loss the ledger can only lag the database (a head it extends), never lead it.
 */
export function writeLedger(path: string, h: SignedHead): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(h) + '\n', { mode: 0o600 });
  renameSync(tmp, path);
}
