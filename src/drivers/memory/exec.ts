/**
 * A command in a memory sandbox as an ExecHandle, with the agent-backed handle's contract: output
 * consumable once as an async iterable, wait() for the exit, stdin only when asked for (bytes written after
 * the exit are dropped), kill by signal (exit 128+signal), timeoutMs kills with SIGKILL and timedOut.
 */
import { InvalidArgumentError, InvalidStateError, type ExecEvent, type ExecExit, type ExecHandle } from '../../core/index.js';
import type { Reader } from './shell.js';

export class MemoryExec implements ExecHandle {
  private readonly events: ExecEvent[] = [];
  private claimed = false;
  private abandoned = false;
  private wake: (() => void) | null = null;
  private exit: ExecExit | null = null;
  private readonly exitWaiters: Array<(x: ExecExit) => void> = [];
  private readonly stdinChunks: Uint8Array[] = [];
  private stdinClosed: boolean;
  private stdinWake: (() => void) | null = null;
  private readonly ctl = new AbortController();
  private killSignal = 9;
  private timedOut = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: { stdin: boolean; timeoutMs?: number }) {
    this.stdinClosed = !o.stdin;
    if (o.timeoutMs) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        void this.kill(9);
      }, o.timeoutMs);
    }
  }

  /** Aborted when the command is killed; the shell's steps stop at it. */
  get signal(): AbortSignal {
    return this.ctl.signal;
  }

  get exited(): boolean {
    return this.exit !== null;
  }

  /** The command's stdin as the shell reads it. */
  readonly stdin: Reader = {
    read: async () => {
      for (;;) {
        const c = this.stdinChunks.shift();
        if (c) return c;
        if (this.stdinClosed || this.exit) return null;
        await new Promise<void>((r) => (this.stdinWake = r));
      }
    },
  };

  emit(type: 'stdout' | 'stderr', data: Uint8Array): void {
    if (this.exit || this.abandoned || data.byteLength === 0) return;
    this.events.push({ type, data: new Uint8Array(data) });
    this.poke();
  }

  /** Ends the command with its status, or with the kill signal when it was killed. */
  finish(code: number): void {
    if (this.exit) return;
    const killed = this.ctl.signal.aborted;
    this.exit = killed ? { code: 128 + this.killSignal, signal: this.killSignal, timedOut: this.timedOut } : { code, signal: null, timedOut: false };
    clearTimeout(this.timer);
    this.events.push({ type: 'exit', exit: this.exit });
    this.poke();
    this.stdinWake?.();
    for (const w of this.exitWaiters.splice(0)) w(this.exit);
  }

  private poke(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  [Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    if (this.claimed) throw new InvalidStateError('the output of a command can be consumed only once');
    this.claimed = true;
    return this.iterate();
  }

  private async *iterate(): AsyncGenerator<ExecEvent> {
    try {
      for (;;) {
        const ev = this.events.shift();
        if (ev) {
          yield ev;
          if (ev.type === 'exit') return;
          continue;
        }
        await new Promise<void>((r) => (this.wake = r));
      }
    } finally {
      this.abandoned = true;
      this.events.length = 0;
    }
  }

  wait(): Promise<ExecExit> {
    if (this.exit) return Promise.resolve(this.exit);
    return new Promise((r) => this.exitWaiters.push(r));
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    if (!this.o.stdin) throw new InvalidStateError('the command was started without stdin: set ExecRequest.stdin');
    if (this.stdinClosed) throw new InvalidStateError('stdin is already closed');
    if (this.exit) return;
    this.stdinChunks.push(new Uint8Array(data));
    this.stdinWake?.();
  }

  async closeStdin(): Promise<void> {
    this.stdinClosed = true;
    this.stdinWake?.();
  }

  async kill(signal = 9): Promise<void> {
    if (!Number.isInteger(signal) || signal < 0 || signal > 64) {
      throw new InvalidArgumentError('signal must be an integer from 0 to 64', { details: { signal } });
    }
    if (this.exit || signal === 0) return;
    this.killSignal = signal;
    this.ctl.abort(new Error(`killed by signal ${signal}`));
    // Every built-in stops at the abort; the exit is reported at once, as for a process that cannot trap.
    this.finish(0);
  }
}
