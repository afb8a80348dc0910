/**
 * The audit log's Merkle tree in PostgreSQL, kept as the SQLite store keeps it (../audit-tree.ts): every
 * perfect subtree hash in `audit_tree` (append-only, by triggers), written in the transaction of the entry
 * it covers, under the audit log's advisory lock; and the newest signed head in `audit_signed_head`,
 * replaced once per transaction just before its COMMIT (PgFrame.beforeCommit), so no committed entry is
 * outside a signature and a rolled-back savepoint takes its nodes and its head with it.
 *
 * Unlike the SQLite tree, nothing is cached between transactions: the frontier is read from the database
 * under the lock each time, since other servers on the same database append too and a rolled-back
 * transaction leaves nothing in memory to reload from. What does not depend on the database (leaves of
 * rows, the verdicts of verify, proof bounds) is core/audit-tree-check.ts, shared with SQLite.
 */
import type { KeyObject } from 'node:crypto';
import type pg from 'pg';
import {
  AppError,
  entryLeafText,
  verifyHeadSignature,
  type HeadSigner,
  type KeyedAuditTree,
  type RowsAndLeaves,
  type SignedHead,
  type StoredEntryParts,
  type TreeVerifyResult,
} from '../../core/index.js';
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
} from '../../core/audit-tree-check.js';
import { MerkleFrontier, rootOf, withNodes, type CompletedNode, type NodePosition, type NodeReader } from '../../core/merkle.js';
import { HeadLedger } from '../audit-ledger.js';
import type { PgFrame, PgScope } from './scope.js';

/**
 * Schema 9 (SQLite has had these tables since its v4; see ../migrations.ts). Node (l, i) covers leaves
 * [i*2^l, (i+1)*2^l); level 0 holds leaf hashes, idx = seq - 1. The tree of a database that already has
 * entries is built when the store opens (PgAuditTree.open), not here: a leaf hashes the row's JSON text
 * exactly as JavaScript spells it, which SQL cannot reproduce byte for byte.
 */
export const PG_V9_AUDIT_TREE = `
CREATE TABLE audit_tree (
  level INTEGER NOT NULL,
  idx BIGINT NOT NULL,
  hash BYTEA NOT NULL,
  PRIMARY KEY (level, idx)
);
CREATE FUNCTION berth_audit_tree_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_tree is append-only' USING ERRCODE = 'restrict_violation';
END $$;
-- UPDATE covers INSERT … ON CONFLICT DO UPDATE too.
CREATE TRIGGER audit_tree_no_update BEFORE UPDATE OR DELETE ON audit_tree FOR EACH ROW EXECUTE FUNCTION berth_audit_tree_append_only();
CREATE TRIGGER audit_tree_no_truncate BEFORE TRUNCATE ON audit_tree FOR EACH STATEMENT EXECUTE FUNCTION berth_audit_tree_append_only();
-- A node is written once: an insert over an existing one is refused with the same error (not a bare
-- unique violation, and not skipped by ON CONFLICT DO NOTHING).
CREATE FUNCTION berth_audit_tree_no_replace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_tree WHERE level = NEW.level AND idx = NEW.idx) THEN
    RAISE EXCEPTION 'audit_tree is append-only' USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER audit_tree_no_replace BEFORE INSERT ON audit_tree FOR EACH ROW EXECUTE FUNCTION berth_audit_tree_no_replace();

-- The newest signed head (one row), replaced with every appending transaction.
CREATE TABLE audit_signed_head (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  tree_size BIGINT NOT NULL,
  root_hash TEXT NOT NULL,
  ts BIGINT NOT NULL,
  key_id TEXT NOT NULL,
  signature TEXT NOT NULL
);
`;

/** Held by every transaction that appends to the log or its tree, until it ends (also across servers). */
const AUDIT_LOCK = 0x6175_6474; // 'audt'
/** Rows (or leaves) per page when reading the whole log: each page is one statement. */
const PAGE = 2000;
/** Nodes per INSERT when writing many (a backfill, a rebuild). */
const INSERT_BATCH = 10_000;
const SUBJECT = { kind: 'audit tree' };

type NodeRow = { level: number; idx: number; hash: Buffer };

/**
 * The leaf count n and the frontier's nodes: for each set bit l of n, node (l, (n >> l) - 1), the perfect
 * subtree ending just before the leaves of the lower bits (MerkleFrontier.load reads exactly these). One row
 * with null node columns when the tree is empty.
 */
const LOAD_FRONTIER = `
SELECT s.n, t.level, t.idx, t.hash
FROM (SELECT coalesce(max(idx) + 1, 0)::bigint AS n FROM audit_tree WHERE level = 0) s
LEFT JOIN LATERAL (
  SELECT a.level, a.idx, a.hash FROM generate_series(0, 52) AS g(l)
  JOIN audit_tree a ON a.level = g.l AND a.idx = (s.n >> g.l) - 1
  WHERE (s.n >> g.l) & 1 = 1
) t ON true`;

/** A reader over nodes already read; a missing one is an internal error (the tree table lost a node). */
function readerOf(rows: readonly NodeRow[]): NodeReader {
  const found = new Map(rows.map((r) => [`${r.level}/${r.idx}`, r.hash]));
  return {
    node: async (level, index) => {
      const h = found.get(`${level}/${index}`);
      if (h === undefined) throw new AppError('internal', `audit tree node (${level}, ${index}) is missing`, { details: { level, index } });
      return h;
    },
  };
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** Serializes appends: taken before the head is read, held to the end of the transaction. */
export async function lockAudit(scope: PgScope): Promise<void> {
  await scope.query('SELECT pg_advisory_xact_lock($1)', [AUDIT_LOCK], { kind: 'audit entry' });
}

export interface PgAuditTreeOptions {
  scope: PgScope;
}

/** Built by PgAuditLog; reached as `store.audit.tree`. */
export class PgAuditTree implements KeyedAuditTree {
  readonly #scope: PgScope;
  #signer: HeadSigner | undefined;
  #ledger = new HeadLedger(undefined);
  /**
   * The tree size this process wrote, or found signed with its key. Leaves beyond it (and beyond the head
   * signed in the database) were added by someone else and are never covered by a signature.
   */
  #trusted = 0;
  /** Per open transaction: the size its own appends brought the tree to. */
  readonly #txTrusted = new WeakMap<PgFrame, number>();
  /** The signature of the last head checked or made here: it is not verified again. */
  #knownSignature: string | undefined;

  constructor(opts: PgAuditTreeOptions) {
    this.#scope = opts.scope;
  }

  #q<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []) {
    return this.#scope.query<R>(sql, params, SUBJECT);
  }

  async #leafCount(): Promise<number> {
    return (await this.#q<{ n: number }>('SELECT coalesce(max(idx) + 1, 0)::bigint AS n FROM audit_tree WHERE level = 0')).rows[0]?.n ?? 0;
  }

  /** The nodes at `wanted`, read in one statement. */
  async #fetch(wanted: readonly NodePosition[]): Promise<NodeReader> {
    if (wanted.length === 0) return readerOf([]);
    const rows = await this.#q<NodeRow>(
      'SELECT level, idx, hash FROM audit_tree WHERE (level, idx) IN (SELECT * FROM unnest($1::int[], $2::bigint[]))',
      [wanted.map((w) => w.level), wanted.map((w) => w.index)],
    );
    return readerOf(rows.rows);
  }

  /** Runs fn over the stored nodes it needs, fetched in one statement. */
  #withNodes<T>(fn: (nodes: NodeReader) => Promise<T>): Promise<T> {
    return withNodes((w) => this.#fetch(w), fn);
  }

  /** The stored tree's frontier, size and nodes read in one statement (each append reads it twice). */
  async #load(): Promise<MerkleFrontier> {
    const rows = (await this.#q<{ n: number } & (NodeRow | { level: null; idx: null; hash: null })>(LOAD_FRONTIER)).rows;
    return MerkleFrontier.load(rows[0]?.n ?? 0, readerOf(rows.filter((r): r is { n: number } & NodeRow => r.hash !== null)));
  }

  async #insert(nodes: readonly CompletedNode[]): Promise<void> {
    for (let i = 0; i < nodes.length; i += INSERT_BATCH) {
      const batch = nodes.slice(i, i + INSERT_BATCH);
      await this.#q('INSERT INTO audit_tree (level, idx, hash) SELECT * FROM unnest($1::int[], $2::bigint[], $3::bytea[])', [
        batch.map((n) => n.level),
        batch.map((n) => n.index),
        batch.map((n) => n.hash),
      ]);
    }
  }

  /** Every row from seq `after` + 1 on, in seq order, a page per statement. */
  async *#rows(after = 0): AsyncGenerator<StoredAuditRow> {
    for (;;) {
      const page = (await this.#q<StoredAuditRow & { seq: number }>(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2`, [after, PAGE])).rows;
      yield* page;
      if (page.length < PAGE) return;
      after = (page[page.length - 1] as { seq: number }).seq;
    }
  }

  async *#leaves(): AsyncGenerator<{ idx: number; hash: Buffer }> {
    let from = 0;
    for (;;) {
      const page = (await this.#q<{ idx: number; hash: Buffer }>('SELECT idx, hash FROM audit_tree WHERE level = 0 AND idx >= $1 ORDER BY idx LIMIT $2', [from, PAGE])).rows;
      yield* page;
      if (page.length < PAGE) return;
      from = (page[page.length - 1] as { idx: number }).idx + 1;
    }
  }

  /**
   * At open: rows written before the tree existed here (a database from schema 8, whose v9 migration just
   * created the tables) get their leaves, from their stored bytes, in one transaction under the lock. Like
   * the SQLite tree's constructor it runs at every open; rows that do not continue the tree (cut or added
   * by hand) stop it, and the start check and verification report them.
   */
  async open(): Promise<void> {
    const rows = (await this.#q<{ n: number }>('SELECT coalesce(max(seq), 0)::bigint AS n FROM audit')).rows[0]?.n ?? 0;
    if (rows <= (await this.#leafCount())) return;
    await this.#scope.transaction(async () => {
      await lockAudit(this.#scope);
      const f = await this.#load();
      const nodes: CompletedNode[] = [];
      for await (const r of this.#rows(f.treeSize)) {
        if (r.seq !== f.treeSize + 1) break;
        nodes.push(...f.append(Buffer.from(entryLeafText(partsOfRow(r)), 'utf8')));
      }
      await this.#insert(nodes);
    });
  }

  /** Resolves once the ledger file holds the last head recorded; rejects if its last write failed. */
  async ledgerSettled(): Promise<void> {
    await this.#ledger.settled();
  }

  async attachSigner(signer: HeadSigner, opts: { ledgerPath?: string; log?: (line: string) => void } = {}): Promise<void> {
    this.#signer = signer;
    this.#ledger = new HeadLedger(opts.ledgerPath, opts.log);
    this.#trusted = await this.#leafCount(); // the start check that follows refuses an unsigned tail
  }

  /** A head in the database signed with this server's key (verified once per signature). */
  #isOurs(h: SignedHead): boolean {
    const signer = this.#signer;
    if (signer === undefined || h.keyId !== signer.keyId) return false;
    if (h.signature === this.#knownSignature) return true;
    if (!verifyHeadSignature(signer.publicKey, h)) return false;
    this.#knownSignature = h.signature;
    return true;
  }

  /**
   * May a head over `f` be signed? Yes when this process wrote every leaf of it (in this transaction or
   * before), or when the head signed in the database covers exactly `f` (another server with this key
   * appended). Otherwise someone added leaves by hand, and signing would vouch for them.
   */
  async #vouched(frame: PgFrame, f: MerkleFrontier): Promise<boolean> {
    if (f.treeSize <= Math.max(this.#trusted, this.#txTrusted.get(frame) ?? 0)) return true;
    const h = await this.#readHead();
    return h !== undefined && h.treeSize === f.treeSize && h.rootHash === f.root().toString('hex') && this.#isOurs(h);
  }

  /**
   * Called by PgAuditLog inside the append transaction (holding the lock), after the row's INSERT: adds
   * the leaf over the bytes just stored and, with a signer, has the head signed before the COMMIT.
   */
  async onAppend(parts: StoredEntryParts & { seq: number; ts: number }): Promise<void> {
    const frame = this.#scope.current();
    if (frame === undefined) throw new AppError('internal', 'audit tree: onAppend outside the append transaction');
    // Rows and tree disagree: someone cut or added rows under us. The tree is left as found (evidence) and
    // the entry goes unsigned, so verification reports it.
    const f = await this.#load();
    if (f.treeSize !== parts.seq - 1) return;
    // Leaves nobody here wrote or signed: this entry (and every later one) goes unsigned, as on SQLite.
    if (this.#signer !== undefined && !(await this.#vouched(frame, f))) return;
    await this.#insert(f.append(Buffer.from(entryLeafText(parts), 'utf8')));
    if (this.#signer === undefined) return;
    this.#txTrusted.set(frame, f.treeSize);
    // One head per transaction (a gated call's verdicts are five appends), signed with the last entry's ts.
    frame.beforeCommit.set('audit-tree-sign', () => this.#signAtCommit(frame, parts.ts));
    frame.afterCommit.set('audit-tree-ledger', () => this.#afterCommit());
  }

  async #signAtCommit(frame: PgFrame, timestamp: number): Promise<void> {
    const f = await this.#load(); // a savepoint may have undone the last append
    if (!(await this.#vouched(frame, f))) return; // leaves this process did not write: left unsigned
    await this.#putHead(this.#sign(f, timestamp));
  }

  #sign(f: MerkleFrontier, timestamp: number): SignedHead {
    const h = (this.#signer as HeadSigner).sign({ treeSize: f.treeSize, rootHash: f.root().toString('hex'), timestamp });
    this.#knownSignature = h.signature;
    return h;
  }

  async #putHead(h: SignedHead): Promise<void> {
    await this.#q(
      `INSERT INTO audit_signed_head (id, tree_size, root_hash, ts, key_id, signature) VALUES (1, $1, $2, $3, $4, $5)
       ON CONFLICT (id) DO UPDATE SET tree_size = excluded.tree_size, root_hash = excluded.root_hash, ts = excluded.ts,
       key_id = excluded.key_id, signature = excluded.signature`,
      [h.treeSize, h.rootHash, h.timestamp, h.keyId, h.signature],
    );
  }

  /** After the COMMIT (durable: PostgreSQL flushed its WAL): the committed head to the ledger, never backwards. */
  async #afterCommit(): Promise<void> {
    const h = await this.#readHead();
    if (h === undefined || !this.#isOurs(h)) return;
    this.#trusted = Math.max(this.#trusted, h.treeSize);
    this.#ledger.record(h);
  }

  async #readHead(): Promise<SignedHead | undefined> {
    const r = (await this.#q<SignedHeadRow>(`SELECT ${SIGNED_HEAD_COLUMNS} FROM audit_signed_head WHERE id = 1`)).rows[0];
    return r && headOfRow(r);
  }

  /** The head signed with the newest committed append (inside a transaction: as that transaction sees it). */
  signedHead(): Promise<SignedHead | undefined> {
    return this.#readHead();
  }

  async signNow(timestamp: number): Promise<SignedHead> {
    if (this.#signer === undefined) throw new AppError('unavailable', 'no audit key is attached');
    return this.#scope.transaction(async () => {
      const frame = this.#scope.current() as PgFrame;
      await lockAudit(this.#scope);
      const f = await this.#load();
      if (!(await this.#vouched(frame, f))) throw untrustedLeaves(f.treeSize, this.#trusted);
      const h = this.#sign(f, timestamp);
      await this.#putHead(h);
      frame.afterCommit.set('audit-tree-ledger', () => this.#afterCommit());
      return h;
    });
  }

  async head(): Promise<{ treeSize: number; rootHash: string }> {
    const f = await this.#load();
    return { treeSize: f.treeSize, rootHash: f.root().toString('hex') };
  }

  async rootAt(size: number): Promise<string> {
    const stored = await this.#leafCount();
    return this.#withNodes((nodes) => storedRootAt({ size: stored, nodes }, size));
  }

  async entry(seq: number): Promise<{ text: string; tenantId: string | null } | undefined> {
    if (!Number.isSafeInteger(seq)) return undefined;
    const r = (await this.#q<StoredAuditRow>(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit WHERE seq = $1`, [seq])).rows[0];
    return r && { text: entryLeafText(partsOfRow(r)), tenantId: typeof r.tenant_id === 'string' ? r.tenant_id : null };
  }

  async inclusionProof(seq: number, treeSize: number): Promise<string[]> {
    const stored = await this.#leafCount();
    return this.#withNodes((nodes) => storedInclusionProof({ size: stored, nodes }, seq, treeSize));
  }

  async consistencyProof(fromSize: number, toSize: number): Promise<string[]> {
    const stored = await this.#leafCount();
    return this.#withNodes((nodes) => storedConsistencyProof({ size: stored, nodes }, fromSize, toSize));
  }

  async rowsAndLastLeaf(): Promise<RowsAndLeaves> {
    const rows = (await this.#q<{ n: number }>('SELECT coalesce(max(seq), 0)::bigint AS n FROM audit')).rows[0]?.n ?? 0;
    const leaves = await this.#leafCount();
    if (rows === 0 || leaves < rows) return rowsAndLeaves(rows, leaves, undefined, undefined);
    const last = (await this.#q<StoredAuditRow>(`SELECT ${STORED_AUDIT_COLUMNS} FROM audit WHERE seq = $1`, [rows])).rows[0];
    const stored = (await this.#q<{ hash: Buffer }>('SELECT hash FROM audit_tree WHERE level = 0 AND idx = $1', [rows - 1])).rows[0]?.hash;
    return rowsAndLeaves(rows, leaves, last, stored);
  }

  async rebuild(timestamp: number): Promise<SignedHead | undefined> {
    const { size, head } = await this.#scope.transaction(async () => {
      await lockAudit(this.#scope);
      const rc = new TreeRecompute();
      for await (const r of this.#rows()) rc.push(r);
      const mem = rc.tree();
      // The only statement that deletes nodes: its guard is lifted for this transaction alone.
      await this.#q('ALTER TABLE audit_tree DISABLE TRIGGER audit_tree_no_update');
      await this.#q('DELETE FROM audit_tree');
      await this.#q('ALTER TABLE audit_tree ENABLE TRIGGER audit_tree_no_update');
      await this.#insert([...mem.nodes()]);
      if (this.#signer === undefined) return { size: mem.size, head: undefined };
      const h = this.#signer.sign({ treeSize: mem.size, rootHash: hex(await rootOf(mem, mem.size)), timestamp });
      this.#knownSignature = h.signature;
      await this.#putHead(h);
      return { size: mem.size, head: h };
    });
    this.#trusted = size;
    this.#ledger.reset(); // the accepted head is smaller than the one recorded: the next append records it
    return head;
  }

  /**
   * Recomputes every leaf from the rows as stored, in one REPEATABLE READ snapshot (appends go on
   * meanwhile, unseen), and judges the stored tree and each head against them.
   */
  async verify(checkpoints: SignedHead[], publicKey: KeyObject): Promise<TreeVerifyResult> {
    const run = async (): Promise<TreeVerifyResult> => {
      const recomputed = new TreeRecompute();
      for await (const r of this.#rows()) recomputed.push(r);
      const check = new StoredLeafCheck(recomputed.tree());
      for await (const { idx, hash } of this.#leaves()) if (!check.push(idx, hash)) break;
      return judgeTree(
        {
          recomputed,
          storedMismatch: check.firstMismatch(),
          storedSize: await this.#leafCount(),
          storedRootAt: async (n) => hex(await this.#withNodes((nodes) => rootOf(nodes, n))),
          signed: await this.#readHead(),
          keyed: this.#signer !== undefined,
        },
        checkpoints,
        publicKey,
      );
    };
    if (this.#scope.current() !== undefined) return run();
    return this.#scope.transaction(async () => {
      await this.#q('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
      return run();
    });
  }
}

