import { readFileSync } from 'node:fs';
import type BetterSqlite3 from 'better-sqlite3';
import { ChainChecker, GENESIS_HASH, hashEntry } from '../core/audit.js';
import type { AuditEntry, AuditInput, AuditLog, AuditQuery, Principal, VerifyResult } from '../core/audit.js';
import { canonicalJson } from '../core/canonical.js';
import { STORED_AUDIT_COLUMNS } from '../core/audit-tree-check.js';
import { ConfigError, InvalidArgumentError } from '../core/errors.js';
import type { Clock } from '../core/store.js';
import { translateSqliteError } from './sqlite-errors.js';
import type { TxScope } from './sqlite-tx.js';
import { SqliteAuditTree } from './audit-tree.js';
import { FileSlot } from './file-slot.js';
import type { SignedHead } from '../core/audit-tree.js';

/**
 * The audit log over the `audit` table (created in migrations.ts, with triggers that abort UPDATE and
 * DELETE). A hash chain shows edits, removals and reorders, but not a cut tail: for that the head (seq +
 * hash) is also kept in a small anchor file beside the database, rewritten (tmp + rename) after each
 * committed append, and compared by verifyAudit().
 */

/** What a flush can vouch for once its fsync returns: the committed head and signed head when it started. */
export interface DurableMark {
  anchor: AuditAnchor;
  head: SignedHead | undefined;
}

/** The head of the chain: the last entry's seq and hash ({0, GENESIS_HASH} for an empty log). */
export interface AuditAnchor {
  seq: number;
  hash: string;
}

/**
 * A JSON column that no longer parses is returned as `{ [UNREADABLE]: <raw column value> }` so that
 * reading a hand-edited file never throws; its hash no longer matches, so verification reports 'edited'.
 */
export const UNREADABLE = '$unreadable';

/** `<db>.audit-head`; undefined for an in-memory database. */
export function anchorPathFor(dbPath: string): string | undefined {
  return dbPath === ':memory:' || dbPath === '' ? undefined : `${dbPath}.audit-head`;
}

export type AnchorRead = { status: 'ok'; anchor: AuditAnchor } | { status: 'missing' } | { status: 'invalid' };

export function readAnchor(path: string): AnchorRead {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { status: 'missing' };
    throw e;
  }
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v === 'object' && v !== null) {
      const { seq, hash } = v as Record<string, unknown>;
      if (
        Number.isSafeInteger(seq) &&
        (seq as number) >= 0 &&
        typeof hash === 'string' &&
        /^[0-9a-f]{64}$/.test(hash) &&
        (seq !== 0 || hash === GENESIS_HASH)
      ) {
        return { status: 'ok', anchor: { seq: seq as number, hash } };
      }
    }
  } catch {
    // fall through: unparseable
  }
  return { status: 'invalid' };
}

/**
 * The anchor file's text. It is written by a FileSlot (tmp + rename, no fsync, off the request path): the
 * database commit it names was fsynced first, so after a power loss or a kill the anchor can only lag the
 * database, which verifyAudit accepts ('behind').
 */
export function anchorText(a: AuditAnchor): string {
  return `{"seq":${a.seq},"hash":"${a.hash}"}\n`;
}

/** The anchor's writer: a FileSlot, or none for an in-memory database. */
export function anchorSlot(path: string | undefined, log?: (line: string) => void): FileSlot | undefined {
  return path === undefined ? undefined : new FileSlot({ path, what: 'head anchor', ...(log ? { log } : {}) });
}

export interface AuditRow {
  seq: number;
  ts: number;
  tenant_id: string | null;
  session_id: string | null;
  principal: string;
  action: string;
  outcome: string;
  data: string;
  prev_hash: string;
  hash: string;
}

/** The audit row's columns, in AuditRow's order (spelled once, in core: the trees read the same rows). */
export const COLUMNS = STORED_AUDIT_COLUMNS;

function parseColumn(raw: unknown): unknown {
  if (typeof raw === 'string') {
    try {
      return JSON.parse(raw) as unknown;
    } catch {
      // fall through
    }
  }
  return { [UNREADABLE]: raw };
}

export function decodeEntry(row: AuditRow): AuditEntry {
  return {
    seq: row.seq,
    ts: row.ts,
    tenantId: row.tenant_id,
    sessionId: row.session_id,
    principal: parseColumn(row.principal) as Principal,
    action: row.action,
    outcome: row.outcome,
    data: parseColumn(row.data) as Record<string, unknown>,
    prevHash: row.prev_hash,
    hash: row.hash,
  };
}

export interface PreparedInput {
  input: AuditInput;
  tenantId: string | null;
  sessionId: string | null;
  principalJson: string;
  dataJson: string;
}

type QueryKey = '' | 't' | 's' | 'ts';

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Checks an append's input and encodes principal and data as the canonical JSON that is stored and hashed. */
export function prepareInput(input: AuditInput): PreparedInput {
  const bad = (field: string): never => {
    throw new InvalidArgumentError(`audit input: bad ${field}`, { details: { field } });
  };
  if (typeof input.action !== 'string' || input.action === '') bad('action');
  if (typeof input.outcome !== 'string' || input.outcome === '') bad('outcome');
  const tenantId = input.tenantId ?? null;
  const sessionId = input.sessionId ?? null;
  if (tenantId !== null && typeof tenantId !== 'string') bad('tenantId');
  if (sessionId !== null && typeof sessionId !== 'string') bad('sessionId');
  if (!isObject(input.principal) || typeof input.principal.kind !== 'string' || typeof input.principal.id !== 'string') {
    bad('principal');
  }
  if (!isObject(input.data)) bad('data');
  let principalJson = '';
  let dataJson = '';
  try {
    // Canonical JSON is stored, so the bytes on disk are the bytes hashEntry() hashes (a Date, say, would
    // otherwise be hashed as {} but stored as a string, and fail verification later).
    principalJson = canonicalJson(input.principal);
    dataJson = canonicalJson(input.data);
  } catch (e) {
    throw new InvalidArgumentError('audit input is not encodable as JSON', { cause: e });
  }
  return { input, tenantId, sessionId, principalJson, dataJson };
}

export interface SqliteAuditLogOptions {
  db: BetterSqlite3.Database;
  /** Source of `ts`. */
  clock: Clock;
  /** Where the head anchor lives; undefined = no anchor (in-memory databases). */
  anchorPath?: string;
  /** Where a failed background write of the anchor is reported. */
  log?: (line: string) => void;
  /** The store's transaction scope: every call waits for a transaction of another caller to end. */
  scope: TxScope;
}

/** Rows per page of scan(): each page is one statement, so the connection is free between pages. */
const SCAN_PAGE = 512;

/** Built by openSqliteStore(); use `store.audit`. */
export class SqliteAuditLog implements AuditLog {
  readonly anchorPath: string | undefined;
  /** The Merkle tree over the entries (and the signed head), written in each append's transaction. */
  readonly tree: SqliteAuditTree;
  readonly #db: BetterSqlite3.Database;
  readonly #clock: Clock;
  readonly #head: BetterSqlite3.Statement<[], { seq: number; hash: string }>;
  readonly #hashAt: BetterSqlite3.Statement<[number], { hash: string }>;
  readonly #byHash: BetterSqlite3.Statement<[string], AuditRow>;
  readonly #insert: BetterSqlite3.Statement<unknown[]>;
  readonly #scan: BetterSqlite3.Statement<[number, number], AuditRow>;
  readonly #scope: TxScope;
  /** Keyed by which of tenantId (t) and sessionId (s) the query filters on. */
  readonly #queries: Record<QueryKey, BetterSqlite3.Statement<[Record<string, unknown>], AuditRow>>;
  readonly #appendTx: (p: PreparedInput) => AuditEntry;
  /** The head this process last saw committed; a head behind it means rows were cut under us. */
  #known: AuditAnchor;
  /** An append ran inside an outer transaction; the anchor is written when that commits. */
  #pending = false;
  /** The newest signed head committed (read after each commit, when no transaction is open). */
  #committedHead: SignedHead | undefined;
  /** The head the open outer transaction's own appends made (undefined outside one, or after a savepoint rollback). */
  #txHead: AuditAnchor | undefined;
  /** The highest seq given to the anchor by this process: the anchor only moves forward. */
  #anchoredSeq = -1;
  readonly #slot: FileSlot | undefined;
  #frozen = false;

  constructor(opts: SqliteAuditLogOptions) {
    this.#db = opts.db;
    this.#clock = opts.clock;
    this.#scope = opts.scope;
    this.anchorPath = opts.anchorPath;
    this.#slot = anchorSlot(opts.anchorPath, opts.log);
    const db = this.#db;
    this.#head = db.prepare('SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1');
    this.#hashAt = db.prepare('SELECT hash FROM audit WHERE seq = ?');
    this.#byHash = db.prepare(`SELECT ${COLUMNS} FROM audit WHERE hash = ? LIMIT 1`);
    this.#insert = db.prepare(`INSERT INTO audit (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    this.#scan = db.prepare(`SELECT ${COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?`);
    const q = (where: string) =>
      db.prepare<[Record<string, unknown>], AuditRow>(
        `SELECT ${COLUMNS} FROM audit WHERE ${where} seq > @afterSeq ORDER BY seq LIMIT @limit`,
      );
    this.#queries = {
      '': q(''),
      t: q('tenant_id = @tenantId AND'),
      s: q('session_id = @sessionId AND'),
      ts: q('tenant_id = @tenantId AND session_id = @sessionId AND'),
    };
    // BEGIN/SAVEPOINT by exec(), not db.transaction(): see KEPT_STATEMENTS in sqlite.ts.
    this.#appendTx = (p: PreparedInput) => {
      const nested = db.inTransaction;
      db.exec(nested ? 'SAVEPOINT berth_append' : 'BEGIN IMMEDIATE');
      try {
        // Inside the store's transaction() the head is signed once, at its COMMIT (beforeCommit()).
        const entry = this.#appendInTx(p, nested && this.#scope.current() !== undefined);
        db.exec(nested ? 'RELEASE berth_append' : 'COMMIT');
        return entry;
      } catch (e) {
        if (db.inTransaction) db.exec(nested ? 'ROLLBACK TO berth_append; RELEASE berth_append' : 'ROLLBACK');
        if (nested) this.afterSavepointRollback();
        throw e;
      }
    };
    this.tree = new SqliteAuditTree({ db, scope: this.#scope });
    this.#known = this.head();
    this.#committedHead = this.tree.committedHead();
    this.#openAnchor();
  }

  /**
   * True when the anchor file disagreed with the database (at open, or a head that moved backwards under
   * this process): the anchor is then left as found, as evidence for verifyAudit, until reanchor().
   */
  get anchorFrozen(): boolean {
    return this.#frozen;
  }

  /** Synchronous, for this store's own bookkeeping and tests: call it only when no transaction is open. */
  head(): AuditAnchor {
    return this.#head.get() ?? { seq: 0, hash: GENESIS_HASH };
  }

  /**
   * Appends one entry in its own IMMEDIATE transaction (or as part of the caller's store.transaction(), in
   * which case the anchor is written when that commits). If the row commits but the anchor cannot be
   * written, throws 'unavailable' with details.committed = true: do not retry the append.
   */
  async append(input: AuditInput): Promise<AuditEntry> {
    const p = prepareInput(input);
    return this.#scope.run(() => this.#appendSync(p));
  }

  #appendSync(p: PreparedInput): AuditEntry {
    const outer = this.#db.inTransaction;
    let entry: AuditEntry;
    try {
      entry = this.#appendTx(p);
    } catch (e) {
      translateSqliteError(e, { kind: 'audit entry' });
    }
    if (outer) {
      this.#pending = true;
    } else {
      // Its own transaction, at the connection's FULL level: on disk, and so is every commit before it.
      this.#known = { seq: entry.seq, hash: entry.hash };
      this.#committedHead = this.tree.committedHead();
      this.markDurable(this.durableMark());
    }
    return entry;
  }

  #appendInTx(p: PreparedInput, nested: boolean): AuditEntry {
    // Inside an outer transaction after its first append, the head is that transaction's own last entry
    // (IMMEDIATE: no other writer until COMMIT), and the committed head was checked by the first append.
    const mine = nested ? this.#txHead : undefined;
    const head = mine ?? this.head();
    const k = this.#known;
    const cut = mine === undefined && (head.seq < k.seq || (head.seq === k.seq ? head.hash !== k.hash : this.#hashOf(k.seq) !== k.hash));
    if (cut) this.#frozen = true;
    const ts = this.#clock.now();
    if (!Number.isSafeInteger(ts)) throw new ConfigError('the clock returned a non-integer time', { details: { ts } });
    const body: Omit<AuditEntry, 'hash'> = {
      seq: head.seq + 1,
      ts,
      tenantId: p.tenantId,
      sessionId: p.sessionId,
      principal: p.input.principal,
      action: p.input.action,
      outcome: p.input.outcome,
      data: p.input.data,
      prevHash: head.hash,
    };
    const hash = hashEntry(body);
    this.#insert.run(body.seq, ts, p.tenantId, p.sessionId, p.principalJson, body.action, body.outcome, p.dataJson, body.prevHash, hash);
    this.#txHead = nested ? { seq: body.seq, hash } : undefined;
    this.tree.onAppend(
      { seq: body.seq, ts, tenantId: p.tenantId, sessionId: p.sessionId, principalJson: p.principalJson, action: body.action, outcome: body.outcome, dataJson: p.dataJson, prevHash: body.prevHash, hash },
      { inOuterTransaction: nested },
    );
    return { ...body, hash };
  }

  async query(q: AuditQuery = {}): Promise<AuditEntry[]> {
    const afterSeq = q.afterSeq ?? 0;
    const limit = q.limit ?? -1; // SQLite: negative LIMIT = no limit
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0) {
      throw new InvalidArgumentError('afterSeq must be a non-negative integer', { details: { field: 'afterSeq' } });
    }
    if (q.limit !== undefined && (!Number.isSafeInteger(q.limit) || q.limit < 1)) {
      throw new InvalidArgumentError('limit must be a positive integer', { details: { field: 'limit' } });
    }
    const key = `${q.tenantId !== undefined ? 't' : ''}${q.sessionId !== undefined ? 's' : ''}` as QueryKey;
    const params = { tenantId: q.tenantId, sessionId: q.sessionId, afterSeq, limit };
    return this.#scope.run(() => this.#queries[key].all(params).map(decodeEntry));
  }

  /**
   * Streams every entry in seq order, a page of rows at a time (the connection is free between pages, so
   * appends may go on meanwhile; the log being append-only, a scan sees a prefix of the chain and may
   * include entries appended while it ran).
   */
  async *scan(): AsyncGenerator<AuditEntry, void, undefined> {
    let after = 0;
    for (;;) {
      const rows = await this.#scope.run(() => this.#scan.all(after, SCAN_PAGE));
      for (const row of rows) yield decodeEntry(row);
      if (rows.length < SCAN_PAGE) return;
      after = (rows[rows.length - 1] as AuditRow).seq;
    }
  }

  /** An entry by its stored hash (a full-table scan: for diagnosis only). */
  entryByHash(hash: string): Promise<AuditEntry | undefined> {
    return this.#scope.run(() => {
      const row = this.#byHash.get(hash);
      return row && decodeEntry(row);
    });
  }

  /**
   * Operator action: accept the database's current head as the truth and rewrite the anchor (after a restore
   * from backup, say). This is exactly what an intruder would want, so only a CLI verb should call it.
   */
  reanchor(): Promise<AuditAnchor> {
    return this.#scope.run(() => {
      const head = this.head();
      this.#known = head;
      this.#frozen = false;
      this.#anchoredSeq = head.seq;
      this.#slot?.set(anchorText(head));
      return head;
    }).then(async (head) => {
      await this.#slot?.settled();
      return head;
    });
  }

  /** Resolves once the anchor file holds every head given to it; rejects if its last write failed. */
  async anchorSettled(): Promise<void> {
    await this.#slot?.settled();
  }

  /**
   * Called by SqliteStore.transaction() after its outermost COMMIT, before another transaction can start.
   * `durable` false for a 'deferred' commit: the anchor and the ledger wait until the store's flush calls
   * markDurable() with what its fsync covered (so after a power cut they can only lag the database).
   */
  afterCommit(durable = true): void {
    this.#txHead = undefined;
    if (this.#pending) {
      this.#pending = false;
      this.#known = this.head();
      this.#committedHead = this.tree.committedHead();
    }
    if (durable) this.markDurable(this.durableMark());
  }

  /** Called by SqliteStore.transaction() just before its outermost COMMIT. */
  beforeCommit(): void {
    this.tree.beforeCommit();
  }

  /** What is committed now, in memory only (safe to call while a transaction is open). */
  durableMark(): DurableMark {
    return { anchor: this.#known, head: this.#committedHead };
  }

  /** Everything up to `m` is on disk: the anchor and the signed-head ledger may move forward to it. */
  markDurable(m: DurableMark): void {
    if (m.anchor.seq > this.#anchoredSeq) this.#anchor(m.anchor);
    this.tree.record(m.head);
  }

  /** Called when a savepoint inside the store's transaction rolled back: it may have undone appends. */
  afterSavepointRollback(): void {
    this.#txHead = undefined;
    this.tree.afterSavepointRollback();
  }

  /** Called by SqliteStore.transaction() after its outermost ROLLBACK. */
  afterRollback(): void {
    this.#txHead = undefined;
    this.#pending = false;
    this.tree.afterRollback();
  }

  #hashOf(seq: number): string | undefined {
    return seq === 0 ? GENESIS_HASH : this.#hashAt.get(seq)?.hash;
  }

  #openAnchor(): void {
    if (this.anchorPath === undefined) return;
    const head = this.#known;
    const read = readAnchor(this.anchorPath);
    if (read.status === 'ok' && this.#hashOf(read.anchor.seq) === read.anchor.hash) {
      // Consistent; the database may be ahead after a crash between COMMIT and the anchor write.
      if (read.anchor.seq < head.seq) this.#anchor(head, true);
    } else if (read.status === 'missing' && head.seq === 0) {
      this.#anchor(head, true);
    } else {
      this.#frozen = true;
    }
  }

  /** Moves the anchor to `a` in the background (at open: now, so a failure stops the open). */
  #anchor(a: AuditAnchor, now = false): void {
    if (this.#slot === undefined || this.#frozen) return;
    this.#anchoredSeq = a.seq;
    if (now) this.#slot.writeSync(anchorText(a));
    else this.#slot.set(anchorText(a));
  }
}

/**
 * How the anchor compared. 'matched': it names the head. 'behind': it names an earlier entry of this chain
 * (a crash between COMMIT and the anchor write). 'ahead': the chain ends before it (tail cut). 'mismatch':
 * the entry at its seq has another hash (history rewritten). 'missing' / 'invalid': no readable anchor, so a
 * cut tail cannot be ruled out. 'none': no anchor path (in-memory). 'unchecked': the chain already failed.
 */
export type AnchorCheck = 'matched' | 'behind' | 'ahead' | 'mismatch' | 'missing' | 'invalid' | 'none' | 'unchecked';

export type AuditVerifyResult = VerifyResult & { anchor: AnchorCheck };

/** What verifyAudit reads: an audit log of either store, and the anchor file it keeps (if any). */
export interface VerifiableAuditLog {
  readonly anchorPath: string | undefined;
  scan(): AsyncIterable<AuditEntry>;
  query(q?: AuditQuery): Promise<AuditEntry[]>;
  /** An entry by its stored hash (for diagnosis only). */
  entryByHash(hash: string): Promise<AuditEntry | undefined>;
  /** Resolves once the anchor file holds every head this process gave it (written in the background). */
  anchorSettled?(): Promise<void>;
}

export interface VerifyAuditOptions {
  /** Anchor file to compare with. Default: the store's own (`<db>.audit-head`). */
  anchorPath?: string;
}

function hashable(e: AuditEntry): boolean {
  const { hash: _hash, ...rest } = e;
  try {
    hashEntry(rest);
    return true;
  } catch {
    return false;
  }
}

function hashesAs(e: AuditEntry, seq: number): boolean {
  const { hash, ...rest } = e;
  try {
    return hashEntry({ ...rest, seq }) === hash;
  } catch {
    return false;
  }
}

/**
 * The seq an entry was appended with, found by following prevHash links back to an entry that still sits
 * where it was written. Bounded, since it only sharpens a diagnosis.
 */
async function originalSeq(log: VerifiableAuditLog, e: AuditEntry, depth: number): Promise<number | undefined> {
  if (e.prevHash === GENESIS_HASH) return 1;
  if (depth === 0) return undefined;
  const prev = await log.entryByHash(e.prevHash);
  if (prev === undefined) return undefined;
  const prevSeq = hashesAs(prev, prev.seq) ? prev.seq : await originalSeq(log, prev, depth - 1);
  return prevSeq === undefined ? undefined : prevSeq + 1;
}

/**
 * verifyChain() over scan(), then the anchor. Never throws on hand-edited rows. Fails closed: for a file
 * database a missing or unreadable anchor is a failure ('removed' after the last entry), since deleting the
 * anchor is how one would hide a cut tail.
 *
 * verifyChain() alone reports a pair whose seq values were swapped as 'edited' (seq is hashed); when the
 * entry's hash does verify under the seq its prevHash link implies, it is reported as 'reordered'.
 */
export async function verifyAudit(store: { readonly audit: VerifiableAuditLog }, opts: VerifyAuditOptions = {}): Promise<AuditVerifyResult> {
  const log = store.audit;
  const anchorPath = opts.anchorPath ?? log.anchorPath;
  // This process's own anchor writes first (a failed one leaves the anchor behind, which is what is read).
  if (anchorPath === log.anchorPath) await log.anchorSettled?.().catch(() => undefined);
  const read = anchorPath === undefined ? undefined : readAnchor(anchorPath);
  const anchorSeq = read?.status === 'ok' ? read.anchor.seq : -1;
  let atAnchor: string | undefined;
  let count = 0;
  let chain: VerifyResult;
  try {
    const checker = new ChainChecker();
    for await (const e of log.scan()) {
      count++;
      if (e.seq === anchorSeq) atAnchor = e.hash;
      if (checker.push(e)) break;
    }
    chain = checker.result();
  } catch (e) {
    // verifyChain throws when hashEntry meets a value canonicalJson refuses (a hand-written 1e999 parses as
    // Infinity). It checks entries in order, so the first such entry is the first bad one; none: rethrow.
    let bad: AuditEntry | undefined;
    for await (const x of log.scan()) {
      if (!hashable(x)) {
        bad = x;
        break;
      }
    }
    if (bad === undefined) throw e;
    chain = { ok: false, entries: count, firstBadSeq: bad.seq, problem: 'edited' };
  }
  if (!chain.ok) {
    const bad = chain.problem === 'edited' ? (await log.query({ afterSeq: chain.firstBadSeq - 1, limit: 1 }))[0] : undefined;
    if (bad !== undefined && bad.seq === chain.firstBadSeq) {
      const was = await originalSeq(log, bad, 16);
      if (was !== undefined && was !== bad.seq && hashesAs(bad, was)) chain = { ...chain, problem: 'reordered' };
    }
    return { ...chain, anchor: 'unchecked' };
  }
  if (read === undefined) return { ...chain, anchor: 'none' };
  const removedAfter = (anchor: AnchorCheck): AuditVerifyResult => ({
    ok: false,
    entries: chain.entries,
    firstBadSeq: chain.entries + 1,
    problem: 'removed',
    anchor,
  });
  if (read.status !== 'ok') return removedAfter(read.status);
  const a = read.anchor;
  if (a.seq > chain.entries) return removedAfter('ahead');
  if ((a.seq === 0 ? GENESIS_HASH : atAnchor) !== a.hash) {
    return { ok: false, entries: chain.entries, firstBadSeq: a.seq, problem: 'edited', anchor: 'mismatch' };
  }
  return { ...chain, anchor: a.seq === chain.entries ? 'matched' : 'behind' };
}
