/**
 * The audit log over PostgreSQL's `audit` table (migrations.ts: triggers refuse UPDATE, DELETE and TRUNCATE
 * and keep seq gapless). Appends from every connection are serialized by a transaction-scoped advisory
 * lock taken before the head is read, so two writers (two servers on one database included) never compute
 * the same seq. Like the SQLite log it keeps a head anchor in a file when given a path: written after the
 * commit, left as found when it disagrees with the database, compared by verifyAudit(); and the Merkle tree
 * with its signed head (audit-tree.ts), written in each append's transaction.
 */
import { GENESIS_HASH, hashEntry } from '../../core/audit.js';
import type { AuditEntry, AuditInput, AuditLog, AuditQuery } from '../../core/audit.js';
import { ConfigError, InvalidArgumentError } from '../../core/errors.js';
import type { Clock } from '../../core/store.js';
import { COLUMNS, anchorSlot, anchorText, decodeEntry, prepareInput, readAnchor, type AuditAnchor, type AuditRow, type VerifiableAuditLog } from '../audit.js';
import type { FileSlot } from '../file-slot.js';
import type { PgScope } from './scope.js';
import { PgAuditTree, lockAudit } from './audit-tree.js';

const SCAN_PAGE = 512;

export interface PgAuditLogOptions {
  scope: PgScope;
  clock: Clock;
  /** Anchor file; undefined = none. */
  anchorPath?: string;
  /** Where a failed background write of the anchor is reported. */
  log?: (line: string) => void;
}

export class PgAuditLog implements AuditLog, VerifiableAuditLog {
  readonly anchorPath: string | undefined;
  /** The Merkle tree over the entries (and the signed head), written in each append's transaction. */
  readonly tree: PgAuditTree;
  readonly #scope: PgScope;
  readonly #clock: Clock;
  /** The highest head this process has committed or seen; the anchor only moves forward from it. */
  #known: AuditAnchor = { seq: 0, hash: GENESIS_HASH };
  #frozen = false;
  readonly #slot: FileSlot | undefined;

  constructor(opts: PgAuditLogOptions) {
    this.#scope = opts.scope;
    this.#clock = opts.clock;
    this.anchorPath = opts.anchorPath;
    this.#slot = anchorSlot(opts.anchorPath, opts.log);
    this.tree = new PgAuditTree({ scope: this.#scope });
  }

  /** True when the anchor disagreed with the database; it is then left as found (evidence) until reanchor(). */
  get anchorFrozen(): boolean {
    return this.#frozen;
  }

  async head(): Promise<AuditAnchor> {
    const row = (await this.#scope.query<{ seq: number; hash: string }>('SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1', [], { kind: 'audit entry' })).rows[0];
    return row ?? { seq: 0, hash: GENESIS_HASH };
  }

  async #hashOf(seq: number): Promise<string | undefined> {
    if (seq === 0) return GENESIS_HASH;
    return (await this.#scope.query<{ hash: string }>('SELECT hash FROM audit WHERE seq = $1', [seq], { kind: 'audit entry' })).rows[0]?.hash;
  }

  /** At open: builds any missing leaves (PgAuditTree.open), then checks the anchor against the database (as the SQLite log does). */
  async open(): Promise<void> {
    await this.tree.open();
    const head = await this.head();
    this.#known = head;
    if (this.anchorPath === undefined) return;
    const read = readAnchor(this.anchorPath);
    if (read.status === 'ok' && (await this.#hashOf(read.anchor.seq)) === read.anchor.hash) {
      if (read.anchor.seq < head.seq) this.#anchor(head, true);
    } else if (read.status === 'missing' && head.seq === 0) {
      this.#anchor(head, true);
    } else {
      this.#frozen = true;
    }
  }

  /** Appends in the caller's transaction, or in one of its own; the anchor moves after the commit (FileSlot). */
  async append(input: AuditInput): Promise<AuditEntry> {
    const p = prepareInput(input);
    return this.#scope.transaction(async () => {
      const frame = this.#scope.current();
      await lockAudit(this.#scope);
      const head = await this.head();
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
      await this.#scope.query(
        `INSERT INTO audit (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [body.seq, ts, p.tenantId, p.sessionId, p.principalJson, body.action, body.outcome, p.dataJson, body.prevHash, hash],
        { kind: 'audit entry' },
      );
      await this.tree.onAppend({
        seq: body.seq, ts, tenantId: p.tenantId, sessionId: p.sessionId, principalJson: p.principalJson, action: body.action,
        outcome: body.outcome, dataJson: p.dataJson, prevHash: body.prevHash, hash,
      });
      // After the commit the head is read again: an entry of a rolled-back savepoint must not be anchored.
      frame?.afterCommit.set('audit-anchor', async () => this.#committed(await this.head()));
      return { ...body, hash };
    });
  }

  #committed(e: AuditAnchor): void {
    if (e.seq <= this.#known.seq) {
      // A head at or behind one already committed: rows were cut under us. Keep the anchor as evidence.
      if (e.seq < this.#known.seq || e.hash !== this.#known.hash) this.#frozen = true;
      return;
    }
    this.#known = { seq: e.seq, hash: e.hash };
    this.#anchor(this.#known);
  }

  /** Moves the anchor to `a` in the background (at open: now, so a failure stops the open). */
  #anchor(a: AuditAnchor, now = false): void {
    if (this.#slot === undefined || this.#frozen) return;
    if (now) this.#slot.writeSync(anchorText(a));
    else this.#slot.set(anchorText(a));
  }

  /** Resolves once the anchor file holds every head given to it; rejects if its last write failed. */
  async anchorSettled(): Promise<void> {
    await this.#slot?.settled();
  }

  async query(q: AuditQuery = {}): Promise<AuditEntry[]> {
    const afterSeq = q.afterSeq ?? 0;
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0) {
      throw new InvalidArgumentError('afterSeq must be a non-negative integer', { details: { field: 'afterSeq' } });
    }
    if (q.limit !== undefined && (!Number.isSafeInteger(q.limit) || q.limit < 1)) {
      throw new InvalidArgumentError('limit must be a positive integer', { details: { field: 'limit' } });
    }
    const res = await this.#scope.query<AuditRow>(
      `SELECT ${COLUMNS} FROM audit WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR session_id = $2) AND seq > $3 ORDER BY seq LIMIT $4`,
      [q.tenantId ?? null, q.sessionId ?? null, afterSeq, q.limit ?? null],
      { kind: 'audit entry' },
    );
    return res.rows.map(decodeEntry);
  }

  /** Every entry in seq order, a page at a time (entries appended meanwhile may be included). */
  async *scan(): AsyncGenerator<AuditEntry, void, undefined> {
    let after = 0;
    for (;;) {
      const rows = (await this.#scope.query<AuditRow>(`SELECT ${COLUMNS} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2`, [after, SCAN_PAGE], { kind: 'audit entry' })).rows;
      for (const row of rows) yield decodeEntry(row);
      if (rows.length < SCAN_PAGE) return;
      after = (rows[rows.length - 1] as AuditRow).seq;
    }
  }

  async entryByHash(hash: string): Promise<AuditEntry | undefined> {
    const row = (await this.#scope.query<AuditRow>(`SELECT ${COLUMNS} FROM audit WHERE hash = $1 LIMIT 1`, [hash], { kind: 'audit entry' })).rows[0];
    return row && decodeEntry(row);
  }

  /** Operator action: accept the database's head as the truth and rewrite the anchor. */
  async reanchor(): Promise<AuditAnchor> {
    const head = await this.head();
    this.#known = head;
    this.#frozen = false;
    this.#slot?.set(anchorText(head));
    await this.#slot?.settled();
    return head;
  }
}
