/**
 * How the asynchronous Store port sits on better-sqlite3's one synchronous connection.
 *
 * A transaction holds the connection from BEGIN IMMEDIATE to COMMIT while its async fn runs, so everything
 * else must wait for it: a statement from outside would otherwise land inside the open transaction (and be
 * rolled back with it, or read its uncommitted rows). ConnectionLock is a FIFO lock handed from holder to
 * holder; TxScope tells, through AsyncLocalStorage, whether a call comes from inside the transaction that
 * holds it. Statements themselves stay synchronous: a call runs at once when the connection is free or
 * when it is made inside the holding transaction, and otherwise queues behind the holder.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** A port interface with each Promise-returning method made synchronous: what the SQLite repos implement. */
export type Syncify<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => Promise<infer R> ? (...args: A) => R : never;
};

export class ConnectionLock {
  #held = false;
  readonly #waiting: Array<() => void> = [];

  /** True while a holder has it; stays true while it is handed to the next in line. */
  get held(): boolean {
    return this.#held;
  }

  acquire(): Promise<void> {
    if (!this.#held) {
      this.#held = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#held = false;
  }
}

/** One open outermost transaction. `active` turns false when it ends, so a late call made from its context queues. */
export interface TxFrame {
  active: boolean;
  /** Savepoints opened so far (for unique names). */
  savepoints: number;
}

export class TxScope {
  readonly lock = new ConnectionLock();
  readonly #als = new AsyncLocalStorage<TxFrame>();

  /** The open transaction this call runs inside, if any. */
  current(): TxFrame | undefined {
    const f = this.#als.getStore();
    return f?.active ? f : undefined;
  }

  within<T>(frame: TxFrame, fn: () => Promise<T>): Promise<T> {
    return this.#als.run(frame, fn);
  }

  /** Runs a synchronous step on the connection: at once when free or inside the holding transaction, else after the holder. */
  run<T>(op: () => T): Promise<T> {
    if (!this.lock.held || this.current()) {
      try {
        return Promise.resolve(op());
      } catch (e) {
        return Promise.reject(e as Error);
      }
    }
    return this.lock.acquire().then(() => {
      try {
        return op();
      } finally {
        this.lock.release();
      }
    });
  }
}

/** The port's async face over a synchronous repo: each method of `sync` runs through scope.run(). */
export function asyncRepo<T extends object>(sync: Syncify<T>, scope: TxScope): T {
  const out: Record<string, unknown> = {};
  const proto = Object.getPrototypeOf(sync) as object;
  for (const key of Object.getOwnPropertyNames(proto)) {
    const f = (sync as Record<string, unknown>)[key];
    if (key === 'constructor' || typeof f !== 'function') continue;
    out[key] = (...args: unknown[]) => scope.run(() => (f as (...a: unknown[]) => unknown).apply(sync, args));
  }
  return Object.freeze(out) as T;
}
