/**
 * The signed-head ledger: the last signed tree head, kept in a file beside the audit key (`<key>.head.json`),
 * outside the database, so whoever can rewrite the database cannot also move it back. Both stores' trees
 * record into it after a commit; the start check (audit-key.ts) compares the database with it.
 */
import { readFileSync } from 'node:fs';
import { parseSignedHead, type SignedHead } from '../core/index.js';
import { FileSlot } from './file-slot.js';

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

/** One tree's writer of the ledger: heads only move forward, except after reset() (an accepted rollback). */
export class HeadLedger {
  /** The tree size last given to the file (it never moves backwards until reset()). */
  #size = 0;
  /**
   * Written off the request path (FileSlot: tmp + rename, no fsync, newest wins), only ever with a head
   * whose entries are durable: after a power loss or a kill the ledger can only lag the database (a head
   * the database extends), never lead it.
   */
  readonly #slot: FileSlot | undefined;

  constructor(readonly path: string | undefined, log?: (line: string) => void) {
    this.#slot = path === undefined ? undefined : new FileSlot({ path, what: 'signed-head ledger', mode: 0o600, ...(log ? { log } : {}) });
  }

  /** A committed head, once the entries it covers are durable, to the file. */
  record(h: SignedHead | undefined): void {
    if (this.#slot === undefined || h === undefined || h.treeSize < this.#size) return;
    this.#slot.set(JSON.stringify(h) + '\n');
    this.#size = h.treeSize;
  }

  /** Resolves once the file holds the last head recorded; rejects if its last write failed. */
  async settled(): Promise<void> {
    await this.#slot?.settled();
  }

  /** After an operator-accepted rebuild: the next head is recorded even though it is smaller. */
  reset(): void {
    this.#size = 0;
  }
}
