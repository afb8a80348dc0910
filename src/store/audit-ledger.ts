/**
 * The signed-head ledger: the last signed tree head, kept in a file beside the audit key (`<key>.head.json`),
 * outside the database, so whoever can rewrite the database cannot also move it back. Both stores' trees
 * record into it after a commit; the start check (audit-key.ts) compares the database with it.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { AppError, parseSignedHead, type SignedHead } from '../core/index.js';

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
 * tmp + rename. No fsync, as for the anchor: the database commit before it was durable, so after a power
 * loss the ledger can only lag the database (a head it extends), never lead it.
 */
export function writeLedger(path: string, h: SignedHead): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(h) + '\n', { mode: 0o600 });
  renameSync(tmp, path);
}

/** One tree's writer of the ledger: heads only move forward, except after reset() (an accepted rollback). */
export class HeadLedger {
  /** The tree size last written (it never moves backwards until reset()). */
  #size = 0;
  constructor(readonly path: string | undefined) {}

  /** A committed head, once the entries it covers are durable, to the file. */
  record(h: SignedHead | undefined): void {
    if (this.path === undefined) return;
    if (h === undefined || h.treeSize < this.#size) return;
    try {
      writeLedger(this.path, h);
    } catch (e) {
      throw new AppError('unavailable', 'audit entry committed but the signed head could not be recorded', {
        details: { treeSize: h.treeSize, path: this.path, committed: true },
        cause: e,
      });
    }
    this.#size = h.treeSize;
  }

  /** After an operator-accepted rebuild: the next head is recorded even though it is smaller. */
  reset(): void {
    this.#size = 0;
  }
}
