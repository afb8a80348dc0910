/**
 * A small file the store rewrites after commits (the audit head anchor, the signed-head ledger), written off
 * the request path: set() returns at once; the write (tmp + rename, no fsync) starts FILE_SLOT_DELAY_MS
 * later on the thread pool, one at a time, each with the newest text set, so a stream of commits costs a
 * write every few commits rather than one each, and the file only ever moves forward. The file may lag
 * what is committed by the writes in flight; both readers accept a file that lags (verify: 'behind'; the start check: the database extends the
 * ledger), never one that leads, and set() is only called with what is already durable.
 *
 * A write that fails is logged and kept as `failure` until a later one succeeds; the newest text is tried
 * again at the next set() and by settled(), which rejects with the failure (the store's flushed() and
 * close() await it).
 */
import { writeFileSync, renameSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { AppError } from '../core/index.js';

/** How long a text set waits before its write starts (texts set meanwhile replace it). */
export const FILE_SLOT_DELAY_MS = 25;

export interface FileSlotOptions {
  path: string;
  /** Names the file in errors and log lines ('head anchor', 'signed-head ledger'). */
  what: string;
  mode?: number;
  log?: (line: string) => void;
}

export class FileSlot {
  /** Text set and not yet written (undefined: the file holds the last text set, or a write of it runs). */
  #want: string | undefined;
  #running: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #failure: AppError | undefined;
  readonly #tmp: string;

  constructor(private readonly o: FileSlotOptions) {
    this.#tmp = `${o.path}.${process.pid}.tmp`;
  }

  /** The last write's error, while no later write has succeeded. */
  get failure(): AppError | undefined {
    return this.#failure;
  }

  /** Schedules `text` to replace the file; returns at once. */
  set(text: string): void {
    this.#want = text;
    if (this.#running || this.#timer) return; // the timer's write, or the one after the running write, takes the newest text
    this.#timer = setTimeout(() => this.#start(), FILE_SLOT_DELAY_MS);
    this.#timer.unref(); // close() and flushed() write what waits; nothing else needs to keep the process up
  }

  /** Resolves once every text set so far is on the file (now, not after the delay); rejects if the last write failed. */
  async settled(): Promise<void> {
    while (this.#running) await this.#running;
    if (this.#want !== undefined) {
      this.#start(); // once more: a failed write is tried again here
      while (this.#running) await this.#running;
    }
    if (this.#failure) throw this.#failure;
  }

  #start(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#running ??= this.#writeWanted().finally(() => {
      this.#running = undefined;
      // A text set while this write ran waits its own delay (a write at most every FILE_SLOT_DELAY_MS);
      // after a failure it waits for the next set() or settled().
      if (this.#want !== undefined && this.#failure === undefined) this.set(this.#want);
    });
  }

  /** Writes `text` now, on this thread (opening a store, whose open fails if it cannot); nothing may be in flight. */
  writeSync(text: string): void {
    if (this.#running || this.#timer) throw new AppError('internal', `${this.o.what}: a synchronous write while one is in flight`);
    this.#want = undefined;
    this.#write(() => {
      writeFileSync(this.#tmp, text, this.#modeOpt());
      renameSync(this.#tmp, this.o.path);
    });
    if (this.#failure) throw this.#failure;
  }

  async #writeWanted(): Promise<void> {
    const text = this.#want;
    if (text === undefined) return;
    this.#want = undefined;
    try {
      await writeFile(this.#tmp, text, this.#modeOpt());
      await rename(this.#tmp, this.o.path);
      this.#failure = undefined;
    } catch (e) {
      this.#fail(e);
      this.#want ??= text; // tried again at the next set() or settled()
    }
  }

  #write(fn: () => void): void {
    try {
      fn();
      this.#failure = undefined;
    } catch (e) {
      this.#fail(e);
    }
  }

  #fail(e: unknown): void {
    const known = this.#failure !== undefined;
    this.#failure = new AppError('unavailable', `the audit ${this.o.what} could not be written: ${(e as Error).message}`, {
      details: { path: this.o.path, committed: true },
      cause: e,
    });
    if (!known) this.o.log?.(`${this.#failure.message} (the entries are committed; it is tried again after the next commit)`);
  }

  #modeOpt(): { mode: number } | undefined {
    return this.o.mode === undefined ? undefined : { mode: this.o.mode };
  }
}
