/**
 * ExecHandle over the agent channel: buffers a command's events until they are consumed (once), applies
 * back-pressure while a consumer lags, and paces stdin by the agent's `i` acknowledgements.
 */
import { type AppError, InvalidArgumentError, InvalidStateError } from '../../core/errors.js';
import type { ExecEvent, ExecExit, ExecHandle } from '../../core/sandbox.js';
import {
  CHUNK,
  CONSUMER_HIGH_WATER,
  CONSUMER_LOW_WATER,
  STDIN_WINDOW,
  V,
  asBuffer,
  dec,
  deferred,
  failure,
  num,
  type Link,
  type Route,
} from './wire.js';

export class AgentExecHandle implements ExecHandle, Route {
  readonly started = deferred<void>();
  /** pid inside the sandbox, once started. */
  pid = 0;
  /** Output bytes dropped because nobody iterated the handle and maxUnconsumedBytes was reached. */
  droppedBytes = 0;
  private readonly exited = deferred<ExecExit>();
  private events: Array<ExecEvent | undefined> = [];
  private head = 0;
  private queued = 0;
  private claimed = false;
  private abandoned = false;
  private exit: ExecExit | null = null;
  private error: AppError | null = null;
  private wake: (() => void) | null = null;
  private stdinClosed = false;
  private stdinInFlight = 0;
  private stdinWaiters: Array<() => void> = [];
  private stdinChain: Promise<void> = Promise.resolve();
  private readonly doneHooks: Array<() => void> = [];

  constructor(
    private readonly o: { id: number; link: Link; stdin: boolean; maxUnconsumedBytes: number },
  ) {}

  onLine(verb: number, rest: Buffer): void {
    if (verb === V.o || verb === V.e) {
      const data = dec(rest.toString('latin1'));
      if (this.abandoned || this.exit) return;
      if (!this.claimed && this.queued + data.length > this.o.maxUnconsumedBytes) {
        this.droppedBytes += data.length;
        return;
      }
      this.push({ type: verb === V.o ? 'stdout' : 'stderr', data }, data.length);
    } else if (verb === V.i) {
      this.stdinInFlight = Math.max(0, this.stdinInFlight - num(rest.toString('latin1')));
      this.wakeStdin();
    } else if (verb === V.x) {
      const [code, sig, timedOut] = rest.toString('latin1').split(' ');
      const s = num(sig);
      this.finish({ code: num(code), signal: s === 0 ? null : s, timedOut: timedOut === '1' });
    } else if (verb === V.r && !this.started.settled) {
      const fields = rest.toString('latin1').split(' ');
      if (fields[0] !== '0') {
        this.o.link.release(this.o.id);
        this.fail(failure(fields));
      } else {
        this.pid = num(fields[1]);
        this.started.resolve();
      }
    }
  }

  onFail(err: AppError): void {
    this.fail(err);
  }

  /** The caller never got this handle (exec() was aborted): drop everything it produces. */
  abandon(): void {
    this.abandoned = this.claimed = true;
    this.events = [];
    this.queued = 0;
  }

  onDone(hook: () => void): void {
    if (this.exit || this.error) hook();
    else this.doneHooks.push(hook);
  }

  private push(ev: ExecEvent, bytes: number): void {
    this.events.push(ev);
    this.queued += bytes;
    if (this.claimed && this.queued > CONSUMER_HIGH_WATER) this.o.link.hold(this, true);
    this.wake?.();
  }

  private finish(exit: ExecExit): void {
    if (this.exit || this.error) return;
    this.exit = exit;
    this.o.link.release(this.o.id);
    this.push({ type: 'exit', exit }, 0);
    this.exited.resolve(exit);
    this.settle();
  }

  private fail(err: AppError): void {
    if (this.exit || this.error) return;
    this.error = err;
    this.started.reject(err);
    this.exited.reject(err);
    this.wake?.();
    this.settle();
  }

  private settle(): void {
    this.wakeStdin();
    for (const h of this.doneHooks.splice(0)) h();
  }

  private wakeStdin(): void {
    for (const w of this.stdinWaiters.splice(0)) w();
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    if (this.claimed) throw new InvalidStateError('the output of a command can be consumed only once');
    this.claimed = true;
    if (this.queued > CONSUMER_HIGH_WATER) this.o.link.hold(this, true);
    return this.iterate();
  }

  private async *iterate(): AsyncGenerator<ExecEvent> {
    try {
      for (;;) {
        if (this.head < this.events.length) {
          const ev = this.events[this.head]!;
          this.events[this.head++] = undefined;
          if (this.head > 1024 && this.head * 2 > this.events.length) {
            this.events = this.events.slice(this.head);
            this.head = 0;
          }
          if (ev.type !== 'exit') {
            this.queued -= ev.data.length;
            if (this.queued < CONSUMER_LOW_WATER) this.o.link.hold(this, false);
          }
          yield ev;
          if (ev.type === 'exit') return;
          continue;
        }
        if (this.error) throw this.error;
        await new Promise<void>((r) => (this.wake = r));
        this.wake = null;
      }
    } finally {
      // Stopped early: nobody can read the rest (the stream is consumable once), so drop it.
      this.abandoned = true;
      this.events = [];
      this.queued = 0;
      this.o.link.hold(this, false);
    }
  }

  wait(): Promise<ExecExit> {
    return this.exited.promise;
  }

  /** Writes to the command's stdin, at most STDIN_WINDOW bytes ahead of what it has read. Bytes sent
   * after the command exited are dropped. */
  writeStdin(data: Uint8Array): Promise<void> {
    if (!this.o.stdin) return Promise.reject(new InvalidStateError('the command was started without stdin: set ExecRequest.stdin'));
    if (this.stdinClosed) return Promise.reject(new InvalidStateError('stdin is already closed'));
    const buf = Buffer.from(asBuffer(data)); // copied: the caller may reuse its buffer once we return
    const run = this.stdinChain.then(() => this.sendStdin(buf));
    this.stdinChain = run.catch(() => undefined);
    return run;
  }

  private async sendStdin(buf: Buffer): Promise<void> {
    for (let off = 0; off < buf.length; off += CHUNK) {
      const piece = buf.subarray(off, off + CHUNK);
      while (this.stdinInFlight > 0 && this.stdinInFlight + piece.length > STDIN_WINDOW && !this.exit && !this.error) {
        await new Promise<void>((r) => this.stdinWaiters.push(r));
      }
      if (this.error) throw this.error;
      if (this.exit) return;
      this.stdinInFlight += piece.length;
      await this.o.link.sendFlow(`I ${this.o.id} ${piece.toString('base64')}\n`);
    }
  }

  closeStdin(): Promise<void> {
    if (!this.o.stdin || this.stdinClosed) return Promise.resolve();
    this.stdinClosed = true;
    const run = this.stdinChain.then(() => {
      if (!this.exit && !this.error) this.o.link.send(`C ${this.o.id}\n`);
    });
    this.stdinChain = run.catch(() => undefined);
    return run;
  }

  async kill(signal = 9): Promise<void> {
    if (!Number.isInteger(signal) || signal < 0 || signal > 64) {
      throw new InvalidArgumentError('signal must be an integer from 0 to 64', { details: { signal } });
    }
    if (this.exit || this.error) return;
    this.o.link.send(`K ${this.o.id} ${signal}\n`);
  }
}
