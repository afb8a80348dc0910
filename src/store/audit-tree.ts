/**
 * The audit log's Merkle tree (RFC 6962, core/merkle.ts) in SQLite: every perfect subtree hash in
 * `audit_tree`, append-only like the audit table, written in the same transaction as the entry it covers;
 * and the latest signed tree head in `audit_signed_head`, replaced in that same transaction, so no committed
 * entry is ever outside a signature (a row appended by hand is: verification and startup catch it).
 *
 * Verification never trusts the stored tree: it recomputes every leaf from the rows' stored bytes. What
 * does not depend on SQLite (leaves of rows, the verdicts, proof bounds) is core/audit-tree-check.ts,
 * shared with the PostgreSQL tree (postgres/audit-tree.ts).
 */
import type BetterSqlite3 from 'better-sqlite3';
import type { KeyObject } from 'node:crypto';
import {
  entryLeafText,
  type HeadSigner,
  type KeyedAuditTree,
  type RowsAndLeaves,
  type SignedHead,
  type StoredEntryParts,
  type TreeVerifyResult,
} from '../core/audit-tree.js';
import {
  SIGNED_HEAD_COLUMNS,
  STORED_AUDIT_COLUMNS,
  StoredLeafCheck,
  TreeRecompute,
  headOfRow,
  judgeTree,
  partsOfRow,
  rowsAndLeaves,
  storedConsistencyProof,
  storedInclusionProof,
  storedRootAt,
  untrustedLeaves,
  type SignedHeadRow,
  type StoredAuditRow,
  type StoredTreeView,
} from '../core/audit-tree-check.js';
import { AppError } from '../core/errors.js';
import type { TxScope } from './sqlite-tx.js';
import { MerkleFrontier, rootOf, type NodeReader } from '../core/merkle.js';
import { HeadLedger } from './audit-ledger.js';

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

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

export interface SqliteAuditTreeOptions {
  db: BetterSqlite3.Database;
  /** The store's connection scope: reads and signing wait for an open transaction held elsewhere. */
  scope?: TxScope;
}

/** Built by SqliteAuditLog; reached as `store.audit.tree`. */
export class SqliteAuditTree implements KeyedAuditTree {
  readonly #db: BetterSqlite3.Database;
  readonly #node: BetterSqlite3.Statement<[number, number], { hash: Buffer }>;
  readonly #insertNode: BetterSqlite3.Statement<[number, number, Buffer]>;
  readonly #leafCount: BetterSqlite3.Statement<[], { n: number | null }>;
  readonly #maxSeq: BetterSqlite3.Statement<[], { n: number | null }>;
  readonly #row: BetterSqlite3.Statement<[number], StoredAuditRow>;
  readonly #rows: BetterSqlite3.Statement<[], StoredAuditRow>;
  readonly #rowsAfter: BetterSqlite3.Statement<[number], StoredAuditRow>;
  readonly #leaves: BetterSqlite3.Statement<[], { idx: number; hash: Buffer }>;
  readonly #signedHead: BetterSqlite3.Statement<[], SignedHeadRow>;
  readonly #putHead: BetterSqlite3.Statement<unknown[]>;
  readonly #scope: TxScope | undefined;
  #frontier: MerkleFrontier;
  #signer: HeadSigner | undefined;
  #ledger = new HeadLedger(undefined);
  /**
   * The tree size this process knows it wrote or found verified at start. Leaves beyond it that it did not
   * add (rows and leaves inserted by hand under a running server) are never covered by a signature.
   */
  #trusted = 0;
  /** An append inside an outer transaction left the head unsigned: the timestamp to sign it with at COMMIT. */
  #signAt: number | undefined;
  /** A savepoint rolled back since the frontier last moved: it may hold leaves the database no longer has. */
  #stale = false;

  constructor(opts: SqliteAuditTreeOptions) {
    const db = (this.#db = opts.db);
    this.#scope = opts.scope;
    this.#node = db.prepare('SELECT hash FROM audit_tree WHERE level = ? AND idx = ?');
    this.#insertNode = db.prepare('INSERT INTO audit_tree (level, idx, hash) VALUES (?, ?, ?)');
    this.#leafCount = db.prepare('SELECT max(idx) + 1 AS n FROM audit_tree WHERE level = 0');
    this.#maxSeq = db.prepare('SELECT max(seq) AS n FROM audit');
    this.#row = db.prepare(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit WHERE seq = ?`);
    this.#rows = db.prepare(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit ORDER BY seq`);
    this.#rowsAfter = db.prepare(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq`);
    this.#leaves = db.prepare('SELECT idx, hash FROM audit_tree WHERE level = 0 ORDER BY idx');
    this.#signedHead = db.prepare(`SELECT ${SIGNED_HEAD_COLUMNS} FROM audit_signed_head WHERE id = 1`);
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

  /** Resolves once the ledger file holds the last head recorded; rejects if its last write failed. */
  async ledgerSettled(): Promise<void> {
    await this.#ledger.settled();
  }

  async attachSigner(signer: HeadSigner, opts: { ledgerPath?: string; log?: (line: string) => void } = {}): Promise<void> {
    this.#signer = signer;
    this.#ledger = new HeadLedger(opts.ledgerPath, opts.log);
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
    this.#ledger.record(h);
  }

  async rowsAndLastLeaf(): Promise<RowsAndLeaves> {
    return this.#exclusive(() => {
      const rows = this.#maxSeq.get()?.n ?? 0;
      const leaves = this.#load().treeSize;
      const last = rows > 0 && leaves >= rows;
      return rowsAndLeaves(rows, leaves, last ? this.#row.get(rows) : undefined, last ? this.#node.get(0, rows - 1)?.hash : undefined);
    });
  }

  async rebuild(timestamp: number): Promise<SignedHead | undefined> {
    return this.#exclusive(() => {
      const mem = this.#recompute().tree();
      this.#db.transaction(() => {
        this.#db.exec('DROP TRIGGER IF EXISTS audit_tree_no_delete; DELETE FROM audit_tree;'); // IF EXISTS: an intruder may have dropped it
        this.#db.exec(TREE_NO_DELETE);
        for (const n of mem.nodes()) this.#insertNode.run(n.level, n.index, n.hash);
      }).immediate();
      this.#frontier = this.#load();
      this.#ledger.reset();
      this.#trusted = this.#frontier.treeSize;
      return this.#signer === undefined ? undefined : this.signNowSync(timestamp);
    });
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
    if (this.#stale || this.#frontier.treeSize !== seq - 1) {
      this.#frontier = this.#load(); // a rolled-back append moved it
      this.#stale = false;
    }
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
    const f = this.#stale ? this.#load() : this.#frontier; // a savepoint may have undone appends since the frontier moved
    this.#stale = false;
    this.#frontier = f;
    if (f.treeSize > this.#trusted) return; // leaves this process did not write: left unsigned, as in #add
    this.#sign(f, ts);
  }

  #sign(f: MerkleFrontier, timestamp: number): void {
    const h = (this.#signer as HeadSigner).sign({ treeSize: f.treeSize, rootHash: f.root().toString('hex'), timestamp });
    this.#putHead.run(h.treeSize, h.rootHash, h.timestamp, h.keyId, h.signature);
  }

  /** Called when a savepoint inside the transaction rolled back: the frontier is reloaded before it is signed. */
  afterSavepointRollback(): void {
    this.#stale = true;
  }

  /** Called when the caller's transaction rolled back: the frontier is reloaded on the next append. */
  afterRollback(): void {
    this.#signAt = undefined;
    this.#stale = false;
    this.#frontier = this.#load();
    this.#trusted = Math.min(this.#trusted, this.#frontier.treeSize);
  }

  async signedHead(): Promise<SignedHead | undefined> {
    return this.#exclusive(() => this.#signedHeadSync());
  }

  #signedHeadSync(): SignedHead | undefined {
    const r = this.#signedHead.get();
    return r && headOfRow(r);
  }

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
      if (f.treeSize > this.#trusted) throw untrustedLeaves(f.treeSize, this.#trusted);
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

  #view(): StoredTreeView {
    return { size: this.#load().treeSize, nodes: { node: async (l, i) => this.#nodeSync(l, i) } };
  }

  async rootAt(size: number): Promise<string> {
    return this.#exclusive(() => storedRootAt(this.#view(), size));
  }

  async entry(seq: number): Promise<{ text: string; tenantId: string | null } | undefined> {
    return this.#exclusive(async () => {
      const r = this.#row.get(seq);
      return r && { text: entryLeafText(partsOfRow(r)), tenantId: typeof r.tenant_id === 'string' ? r.tenant_id : null };
    });
  }

  async inclusionProof(seq: number, treeSize: number): Promise<string[]> {
    return this.#exclusive(() => storedInclusionProof(this.#view(), seq, treeSize));
  }

  async consistencyProof(fromSize: number, toSize: number): Promise<string[]> {
    return this.#exclusive(() => storedConsistencyProof(this.#view(), fromSize, toSize));
  }

  /** Every leaf recomputed from the rows as they are stored now. */
  #recompute(): TreeRecompute {
    const rc = new TreeRecompute();
    for (const r of this.#rows.iterate()) rc.push(r);
    return rc;
  }

  async verify(checkpoints: SignedHead[], publicKey: KeyObject): Promise<TreeVerifyResult> {
    return this.#exclusive(async () => {
      const recomputed = this.#recompute();
      const check = new StoredLeafCheck(recomputed.tree());
      for (const { idx, hash } of this.#leaves.iterate()) if (!check.push(idx, hash)) break;
      const nodes: NodeReader = { node: async (l, i) => this.#nodeSync(l, i) };
      return judgeTree(
        {
          recomputed,
          storedMismatch: check.firstMismatch(),
          storedSize: this.#load().treeSize,
          storedRootAt: async (n) => hex(await rootOf(nodes, n)),
          signed: this.#signedHeadSync(),
          keyed: this.#signer !== undefined,
        },
        checkpoints,
        publicKey,
      );
    });
  }
}
