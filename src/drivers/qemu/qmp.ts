import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { abortError, SandboxError, TimeoutError } from '../../core/index.js';

/**
 * A QMP (QEMU Machine Protocol) client over a unix socket: the greeting, capabilities negotiation,
 * commands matched to their answers by id, and asynchronous events as an async iterable. One client
 * per QEMU process; the driver, the probe and the benchmark's raw path all use it.
 */

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

/** A command QEMU refused; `qmpClass` is QMP's error class (e.g. GenericError, CommandNotFound). */
export class QmpError extends SandboxError {
  constructor(
    readonly command: string,
    readonly qmpClass: string,
    desc: string,
  ) {
    super(`QMP ${command}: ${desc}`, { details: { command, class: qmpClass } });
  }
}

export interface QmpConnectOptions {
  /** Path of QEMU's QMP socket (-chardev socket,server=on,...). Required. */
  path: string;
  /** Keep retrying the connection until this many ms have passed (QEMU creates the socket after it starts). Default 10000. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Called between retries; a rejection (e.g. "QEMU exited") stops retrying with that error. */
  stillStarting?: () => void;
}

interface Pending {
  command: string;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

export class QmpClient {
  private buf = '';
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly listeners = new Set<(e: QmpEvent) => void>();
  private readonly closeListeners = new Set<(err?: Error) => void>();
  private closedWith: Error | undefined;
  private closed = false;

  private constructor(private readonly sock: Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (chunk: string) => this.onData(chunk));
    sock.on('error', (e) => this.handleClose(e));
    sock.on('close', () => this.handleClose());
  }

  /** Connects (retrying while the socket does not exist yet), reads the greeting and leaves negotiation mode. */
  static async connect(opts: QmpConnectOptions): Promise<QmpClient> {
    const signal = AbortSignal.any([AbortSignal.timeout(opts.timeoutMs ?? 10_000), ...(opts.signal ? [opts.signal] : [])]);
    let sock: Socket | undefined;
    let lastErr: unknown;
    while (!sock) {
      if (signal.aborted) {
        const e = abortError(signal);
        if (e instanceof TimeoutError) throw new TimeoutError(`QMP socket ${opts.path} did not answer: ${String(lastErr)}`, { cause: lastErr });
        throw e;
      }
      opts.stillStarting?.();
      try {
        sock = await new Promise<Socket>((resolve, reject) => {
          const s = connect(opts.path);
          s.once('connect', () => {
            s.removeAllListeners('error');
            resolve(s);
          });
          s.once('error', (e) => {
            s.destroy();
            reject(e);
          });
        });
      } catch (e) {
        lastErr = e;
        await sleep(5, undefined, { signal }).catch(() => undefined);
      }
    }
    const client = new QmpClient(sock);
    try {
      await client.greeting(signal);
      await client.execute('qmp_capabilities', undefined, { signal });
    } catch (e) {
      client.close();
      throw e;
    }
    return client;
  }

  private greetingWaiter: ((v: unknown) => void) | undefined;
  private greeting(signal: AbortSignal): Promise<unknown> {
    return this.withSignal(
      new Promise((resolve) => {
        this.greetingWaiter = resolve;
      }),
      signal,
      () => (this.greetingWaiter = undefined),
    );
  }

  private onData(chunk: string): void {
    this.buf += chunk;
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if ('QMP' in msg) {
        this.greetingWaiter?.(msg);
        this.greetingWaiter = undefined;
      } else if (typeof msg.event === 'string') {
        for (const l of [...this.listeners]) l(msg as unknown as QmpEvent);
      } else if (msg.id !== undefined) {
        const p = this.pending.get(String(msg.id));
        if (!p) continue;
        this.pending.delete(String(msg.id));
        if ('error' in msg) {
          const err = msg.error as { class?: string; desc?: string };
          p.reject(new QmpError(p.command, err.class ?? 'GenericError', err.desc ?? 'unknown error'));
        } else p.resolve(msg.return);
      }
    }
  }

  private handleClose(err?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.closedWith = new SandboxError(`QMP connection closed${err ? `: ${err.message}` : ''}`, { cause: err });
    for (const p of this.pending.values()) p.reject(this.closedWith);
    this.pending.clear();
    this.sock.destroy();
    const ls = [...this.closeListeners];
    this.closeListeners.clear();
    for (const l of ls) l(err);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Runs a command and resolves with its `return` value; rejects with QmpError when QEMU refuses it. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>, opts: { signal?: AbortSignal } = {}): Promise<T> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const id = String(this.nextId++);
    const p = new Promise<T>((resolve, reject) => {
      this.pending.set(id, { command, resolve: resolve as (v: unknown) => void, reject });
    });
    this.sock.write(JSON.stringify(args ? { execute: command, arguments: args, id } : { execute: command, id }) + '\n');
    return opts.signal ? this.withSignal(p, opts.signal, () => this.pending.delete(id)) : p;
  }

  /** Subscribes to events; returns the unsubscribe function. */
  onEvent(listener: (e: QmpEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Called once when the connection ends (QEMU exited, or close()); returns the unsubscribe function. */
  onClose(listener: (err?: Error) => void): () => void {
    if (this.closed) {
      queueMicrotask(() => listener());
      return () => undefined;
    }
    this.closeListeners.add(listener);
    return () => this.closeListeners.delete(listener);
  }

  /**
   * Events as an async iterable, from now until the connection closes or the signal fires. Events that
   * arrive while the consumer is busy are queued.
   */
  events(opts: { signal?: AbortSignal } = {}): AsyncIterable<QmpEvent> {
    const self = this;
    return {
      [Symbol.asyncIterator](): AsyncIterator<QmpEvent> {
        const queue: QmpEvent[] = [];
        let wake: (() => void) | undefined;
        let done = self.closed;
        const off = self.onEvent((e) => {
          queue.push(e);
          wake?.();
        });
        const finish = () => {
          done = true;
          wake?.();
        };
        const offClose = self.onClose(finish);
        opts.signal?.addEventListener('abort', finish, { once: true });
        const cleanup = () => {
          off();
          offClose();
          opts.signal?.removeEventListener('abort', finish);
        };
        return {
          async next(): Promise<IteratorResult<QmpEvent>> {
            for (;;) {
              const e = queue.shift();
              if (e) return { value: e, done: false };
              if (done) {
                cleanup();
                return { value: undefined, done: true };
              }
              await new Promise<void>((r) => (wake = r));
              wake = undefined;
            }
          },
          async return(): Promise<IteratorResult<QmpEvent>> {
            cleanup();
            done = true;
            return { value: undefined, done: true };
          },
        };
      },
    };
  }

  /** Resolves with the first event named `name` that satisfies `match`, from now on. */
  waitEvent(name: string, match: (e: QmpEvent) => boolean = () => true, opts: { signal?: AbortSignal } = {}): Promise<QmpEvent> {
    let offEvent: () => void = () => undefined;
    let offClose: () => void = () => undefined;
    const off = () => {
      offEvent();
      offClose();
    };
    const p = new Promise<QmpEvent>((resolve, reject) => {
      offEvent = this.onEvent((e) => {
        if (e.event === name && match(e)) {
          off();
          resolve(e);
        }
      });
      offClose = this.onClose(() => {
        off();
        reject(this.closedWith ?? new SandboxError('QMP connection closed'));
      });
    });
    return opts.signal ? this.withSignal(p, opts.signal, off) : p;
  }

  close(): void {
    this.handleClose();
  }

  private withSignal<T>(p: Promise<T>, signal: AbortSignal, cleanup: () => void): Promise<T> {
    if (signal.aborted) {
      cleanup();
      return Promise.reject(abortError(signal));
    }
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        cleanup();
        reject(abortError(signal));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(
        (v) => {
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (e: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      );
    });
  }
}
