/**
 * Background processes of a session (issue 9 §1): `session.exec(argv, {background: true})` starts one and
 * resolves with a BackgroundProcess at once; `session.processes.list()` / `.get(execId)` find them later,
 * from any client, after hibernate, wake or a server restart (the sandbox keeps them).
 */
import { AppError } from '../core/errors.js';
import { base64ToBytes } from '../protocol/exec.js';
import { fromWireError } from '../protocol/errors.js';
import { decodeProcessLine, type ProcessOutputLine } from '../protocol/process-lines.js';
import type { BackgroundExecView, ProcessKillView, ProcessListView, ProcessView } from '../protocol/processes.js';
import type { ExecBody } from '../protocol/types.js';
import type { ExecOptions, ExecResult } from './exec.js';
import type { Transport } from './http.js';

export interface ProcessOutputOptions {
  /** Keep streaming live output until the command ends. Default false: what the sandbox holds now. */
  follow?: boolean;
  /** Where to start: a `cursor` from an earlier chunk ("stdoutOffset,stderrOffset"), or a stdout offset. Default: the oldest bytes kept. */
  offset?: string | number;
  /**
   * While following, reconnect from the last cursor when the connection drops (a server restart):
   * this many attempts in a row, 500 ms apart. Default 20. Nothing is lost or repeated across them.
   */
  reconnects?: number;
  signal?: AbortSignal;
}

/** A piece of output: `offset` is the stream offset of data[0]; resume from `cursor` to continue after it. */
export type ProcessOutput =
  | { type: 'stdout' | 'stderr'; data: Uint8Array; offset: number; cursor: string }
  | { type: 'exit'; exit: ExecResult };

const enc = encodeURIComponent;

export class BackgroundProcess {
  constructor(
    private readonly t: Transport,
    readonly sessionId: string,
    readonly execId: string,
    /** The pid inside the sandbox, when known (set by exec). */
    readonly pid?: number,
  ) {}

  private get base(): string {
    return `/sessions/${enc(this.sessionId)}/processes/${enc(this.execId)}`;
  }

  /** The command's record now: state, exit code, times, bytes written. */
  info(opts: { signal?: AbortSignal } = {}): Promise<ProcessView> {
    return this.t.json<ProcessView>('GET', this.base, { signal: opts.signal });
  }

  /** Signals the command's process group (default SIGTERM). Leaving output() never does this. */
  kill(opts: { signal?: number | string; abort?: AbortSignal } = {}): Promise<ProcessKillView> {
    return this.t.json<ProcessKillView>('POST', `${this.base}/kill`, { json: opts.signal === undefined ? {} : { signal: opts.signal }, signal: opts.abort });
  }

  /** Follows the output to the end and resolves with the exit. */
  async wait(opts: { signal?: AbortSignal } = {}): Promise<ExecResult> {
    const info = await this.info(opts);
    let offset = `${info.stdoutBytes},${info.stderrBytes}`;
    for await (const ev of this.output({ follow: true, offset, signal: opts.signal })) {
      if (ev.type === 'exit') return ev.exit;
      offset = ev.cursor;
    }
    throw new AppError('unavailable', `process ${this.execId}: the output ended without an exit`, { retryable: true });
  }

  /** The output the sandbox keeps (the last 1 MiB of each stream), then live output with follow. */
  output(opts: ProcessOutputOptions = {}): AsyncIterable<ProcessOutput> {
    const t = this.t;
    const path = `${this.base}/output`;
    const execId = this.execId;
    const max = opts.reconnects ?? 20;
    let cursor = opts.offset === undefined ? undefined : String(opts.offset);
    return {
      async *[Symbol.asyncIterator]() {
        for (let failures = 0; ; ) {
          let lines: AsyncGenerator<ProcessOutputLine>;
          let signal: AbortSignal | undefined;
          try {
            const sent = await t.send('GET', path, { query: { follow: opts.follow ? 'true' : undefined, offset: cursor }, signal: opts.signal, deadline: false });
            signal = sent.signal;
            if (!sent.res.body) throw new AppError('internal', `${path}: empty response`);
            lines = processLines(sent.res.body);
          } catch (e) {
            if (!retry(e, opts, ++failures, max)) throw e;
            await new Promise((r) => setTimeout(r, 500));
            continue;
          }
          try {
            for await (const l of lines) {
              failures = 0;
              if (l.type === 'ping') continue;
              if (l.type === 'error') throw fromWireError({ error: l.error }, 200);
              if (l.type === 'end') return;
              if (l.type === 'exit') {
                yield { type: 'exit', exit: { code: l.code, signal: l.signal, timedOut: l.timedOut } };
                return;
              }
              cursor = l.cursor;
              yield { type: l.type, data: base64ToBytes(l.data), offset: l.offset, cursor: l.cursor };
            }
            // A stream that stops without end or exit was cut (the server went away): resume from the cursor.
            throw new AppError('unavailable', `${path}: the stream was cut`, { retryable: true });
          } catch (e) {
            const err = t.failure(e, signal, `output of ${execId}`);
            if (!retry(err, opts, ++failures, max)) throw err;
            await new Promise((r) => setTimeout(r, 500));
          }
        }
      },
    };
  }
}

function retry(e: unknown, opts: ProcessOutputOptions, failures: number, max: number): boolean {
  return !!opts.follow && !opts.signal?.aborted && failures <= max && e instanceof AppError && e.code === 'unavailable';
}

async function* processLines(body: ReadableStream<Uint8Array>): AsyncGenerator<ProcessOutputLine> {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.trim() !== '') yield decodeProcessLine(line);
    }
  }
}

/** `session.processes`. */
export class SessionProcesses {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  /** Running and finished background commands, newest first. */
  async list(opts: { signal?: AbortSignal } = {}): Promise<ProcessView[]> {
    return (await this.t.json<ProcessListView>('GET', `/sessions/${enc(this.sessionId)}/processes`, { signal: opts.signal })).processes;
  }

  /** A handle by id (no request is made; info() or output() of an unknown id throw not_found). */
  get(execId: string): BackgroundProcess {
    return new BackgroundProcess(this.t, this.sessionId, execId);
  }

  /** Starts a background command (what session.exec(argv, {background: true}) does). */
  async start(argv: string[], opts: Omit<ExecOptions, 'stdin'> = {}): Promise<BackgroundProcess> {
    if ((opts as ExecOptions).stdin !== undefined) throw new AppError('invalid_argument', 'stdin: a background command has no stdin', { details: { field: 'stdin' } });
    const body: ExecBody = { argv, cwd: opts.cwd, env: opts.env, timeoutMs: opts.timeoutMs, background: true };
    const v = await this.t.json<BackgroundExecView>('POST', `/sessions/${enc(this.sessionId)}/exec`, { json: body, signal: opts.signal });
    return new BackgroundProcess(this.t, this.sessionId, v.execId, v.pid);
  }
}
