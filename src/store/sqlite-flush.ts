/**
 * Makes 'deferred' commits durable in the background (TransactionOptions in core/store.ts).
 *
 * A deferred commit runs at synchronous=NORMAL: its WAL frames are written but not fsynced. This flusher
 * then fsyncs the WAL file from the thread pool (the event loop goes on serving), and hands the audit log
 * the mark captured before that fsync began, so the head anchor and the signed-head ledger move only to
 * entries already on disk. One fsync runs at a time; commits made while it runs are covered by the next.
 * It starts FLUSH_DELAY_MS after the first deferred commit it covers, so a burst shares one fsync; and when
 * a 'full' commit came after the last deferred one, that commit's own fsync covered them all (and moved the
 * anchor itself), so the flush has nothing left to do. Under a steady stream of gated calls (a durable
 * decision before each call, a deferred result after it) this leaves almost no fsync of its own.
 */
import { open } from 'node:fs/promises';
import type { DurableMark } from './audit.js';

/** How long after a deferred commit its fsync starts, ms: the most a deferred commit stays off the disk, plus one fsync. */
export const FLUSH_DELAY_MS = 10;

export interface WalFlusherOptions {
  /** `<db>-wal`. */
  walPath: string;
  /** The committed state now (in memory; called with no transaction half-done on the JS side). */
  capture: () => DurableMark;
  /** Everything in `mark` is on disk. */
  durable: (mark: DurableMark) => void;
  /** True when a 'full' commit came after the last deferred one (its fsync covered everything before it). */
  covered: () => boolean;
  log: (line: string) => void;
}

export class WalFlusher {
  #running: Promise<void> | undefined;
  #again = false;
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: WalFlusherOptions) {}

  /** Call right after a deferred COMMIT, before another transaction can start. */
  schedule(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#timer ??= setTimeout(() => this.#start(), FLUSH_DELAY_MS);
  }

  /** Resolves once every deferred commit made before the call is on disk (and the anchor moved to it). */
  async drain(): Promise<void> {
    if (this.#timer) this.#start();
    while (this.#running) await this.#running;
  }

  #start(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#running ??= this.#loop().finally(() => {
      this.#running = undefined;
    });
  }

  async #loop(): Promise<void> {
    do {
      this.#again = false;
      if (this.o.covered()) continue; // a later full commit fsynced the WAL and moved the anchor itself
      const mark = this.o.capture();
      try {
        await fsyncFile(this.o.walPath);
        this.o.durable(mark);
      } catch (e) {
        // The commits stand; the anchor waits for the next full commit, which fsyncs the same WAL.
        this.o.log(`deferred commits not flushed yet: ${(e as Error).message}`);
      }
    } while (this.#again);
  }
}

async function fsyncFile(path: string): Promise<void> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (e) {
    // No WAL file: SQLite removed it on a checkpoint at close, after syncing the database file.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
