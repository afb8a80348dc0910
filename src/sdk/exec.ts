/**
 * A running command. Output is an async iterable of stdout/stderr chunks (iterate it once, to the end);
 * wait() resolves with the exit. Cancelling the exec's signal, or leaving the loop early, drops the
 * connection, which kills the command.
 */
import { AppError, CancelledError, InvalidStateError } from '../core/errors.js';
import { base64ToBytes } from '../protocol/exec.js';
import { fromWireError } from '../protocol/errors.js';
import type { ExecBody, ExecStreamLine, KillView } from '../protocol/types.js';
import type { Transport } from './http.js';
import { ndjsonLines, toBody, type BytesSource } from './streams.js';

export interface ExecOptions {
  /** Working directory (absolute). Default: the sandbox's. */
  cwd?: string;
  /** Merged over the session's environment. */
  env?: Record<string, string>;
  /** Kill the command after this many ms (then wait() reports timedOut). 0 or absent: no limit. */
  timeoutMs?: number;
  /**
   * Fed to the command's stdin, then stdin is closed. A Node Readable (process.stdin) works. Absent:
   * stdin is /dev/null.
   */
  stdin?: BytesSource;
  /** Aborting kills the command and rejects what is pending with AppError('cancelled'). */
  signal?: AbortSignal;
}

export interface ExecOutput {
  type: 'stdout' | 'stderr';
  data: Uint8Array;
}

export interface ExecResult {
  /** Exit code; 128+signal when killed by one. */
  code: number;
  /** Signal number when killed by one, else null. */
  signal: number | null;
  /** True when timeoutMs elapsed and the command was killed for it. */
  timedOut: boolean;
}

export class Execution implements AsyncIterable<ExecOutput> {
  readonly execId: string;
  readonly sessionId: string;
  private consumed = false;
  private readonly exit: Promise<ExecResult>;
  private settle!: { resolve: (r: ExecResult) => void; reject: (e: unknown) => void };
  private settled = false;
  private stdinAbort: AbortController | null = null;

  private constructor(
    private readonly t: Transport,
    sessionId: string,
    execId: string,
    private readonly lines: AsyncGenerator<ExecStreamLine>,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.sessionId = sessionId;
    this.execId = execId;
    this.exit = new Promise<ExecResult>((resolve, reject) => {
      this.settle = {
        resolve: (r) => ((this.settled = true), resolve(r)),
        reject: (e) => ((this.settled = true), reject(e)),
      };
    });
    this.exit.catch(() => undefined); // a caller who never waits must not see an unhandled rejection
  }

  /** Starts a command; resolves once the server has started it (errors such as not_found reject here). */
  static async start(t: Transport, sessionId: string, argv: string[], opts: ExecOptions = {}): Promise<Execution> {
    const body: ExecBody = { argv, cwd: opts.cwd, env: opts.env, timeoutMs: opts.timeoutMs, stdin: opts.stdin !== undefined };
    const what = `exec in ${sessionId}`;
    const { res, signal } = await t.send('POST', `/sessions/${encodeURIComponent(sessionId)}/exec`, { json: body, signal: opts.signal, deadline: false });
    if (!res.body) throw new AppError('internal', `${what}: empty response`);
    const lines = guard(ndjsonLines(res.body), (e) => t.failure(e, signal, what));
    const first = await lines.next();
    if (first.done) throw new AppError('unavailable', `${what}: the stream ended before the command started`, { retryable: true });
    if (first.value.type === 'error') throw fromWireError({ error: first.value.error }, 200);
    if (first.value.type !== 'started') throw new AppError('internal', `${what}: expected a started line, got ${first.value.type}`);
    const ex = new Execution(t, sessionId, first.value.execId, lines, opts.signal);
    if (opts.stdin !== undefined) ex.feedStdin(opts.stdin);
    return ex;
  }

  private feedStdin(source: BytesSource): void {
    const ac = new AbortController();
    this.stdinAbort = ac;
    const signal = this.signal ? AbortSignal.any([this.signal, ac.signal]) : ac.signal;
    const path = `/sessions/${encodeURIComponent(this.sessionId)}/execs/${encodeURIComponent(this.execId)}/stdin`;
    // Stdin failures are not the command's failures: once it exits, whatever was unsent no longer matters.
    void this.t
      .send('POST', path, { query: { close: true }, body: toBody(source), signal, deadline: false })
      .then(({ res }) => res.body?.cancel())
      .catch(() => undefined);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ExecOutput> {
    if (this.consumed) throw new InvalidStateError('an Execution can be iterated only once');
    this.consumed = true;
    try {
      for await (const line of this.lines) {
        switch (line.type) {
          case 'stdout':
          case 'stderr':
            yield { type: line.type, data: base64ToBytes(line.data) };
            break;
          case 'exit':
            this.settle.resolve({ code: line.code, signal: line.signal, timedOut: line.timedOut });
            return;
          case 'error':
            throw fromWireError({ error: line.error }, 200);
          case 'started':
          case 'ping':
            break;
        }
      }
      throw new AppError('unavailable', `exec ${this.execId}: the stream ended before the command exited`, { retryable: true });
    } catch (e) {
      this.settle.reject(e);
      throw e;
    } finally {
      // Stopping early (break) drops the connection, and the server kills a command whose client left.
      if (!this.settled) this.settle.reject(new CancelledError('output iteration stopped before the command exited; the command was killed'));
      this.stdinAbort?.abort();
      await this.lines.return(undefined);
    }
  }

  /**
   * The exit. If the output is not being iterated, calling wait() drains and discards it. Rejects with
   * AppError('cancelled') when the signal fires, or the stream's error.
   */
  wait(): Promise<ExecResult> {
    if (!this.consumed) {
      void (async () => {
        try {
          for await (const _ of this) void _;
        } catch {
          // surfaced through this.exit
        }
      })();
    }
    return this.exit;
  }

  /** Sends a signal (number or name; default SIGKILL) to the command's process group. */
  async kill(signal?: number | string, opts: { signal?: AbortSignal } = {}): Promise<KillView> {
    const path = `/sessions/${encodeURIComponent(this.sessionId)}/execs/${encodeURIComponent(this.execId)}/kill`;
    return this.t.json<KillView>('POST', path, { json: signal === undefined ? {} : { signal }, signal: opts.signal });
  }
}

/** Rewrites errors thrown while reading (connection lost, abort) into AppErrors. */
async function* guard<T>(src: AsyncGenerator<T>, map: (e: unknown) => AppError): AsyncGenerator<T> {
  try {
    yield* src;
  } catch (e) {
    throw map(e);
  }
}
