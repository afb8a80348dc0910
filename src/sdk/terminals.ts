/**
 * Terminals of a session (issue 9 §2): `session.terminals.create({cols, rows})` opens a PTY in the sandbox
 * and attaches; `.attach(termId)` joins one later (from any client, after hibernate, wake or a server
 * restart: the sandbox keeps it). The first client to attach holds input; others watch (`mode: 'watch'`),
 * and the server refuses their input. A joiner first receives the current screen, then live output.
 *
 * Browser-safe: the global WebSocket (browsers, Node 22+), authenticated by a single-use ticket from
 * POST …/tickets, since a browser WebSocket cannot carry an Authorization header.
 */
import { AppError } from '../core/errors.js';
import type { TerminalKillView, TerminalListView, TerminalServerMessage, TerminalTicketView, TerminalView } from '../protocol/terminals.js';
import type { Transport } from './http.js';

export interface TerminalCreateOptions {
  /** Window size in cells. Default 80 x 24. */
  cols?: number;
  rows?: number;
  /** Working directory (absolute). Default: the shell's home. */
  cwd?: string;
  /** Merged over the session env; TERM defaults to xterm-256color. */
  env?: Record<string, string>;
  /** argv. Default: the user's login shell. */
  command?: string[];
  /** 'control' (default) takes input if nobody holds it; 'watch' never does. */
  mode?: 'control' | 'watch';
  signal?: AbortSignal;
}

export interface TerminalExit {
  code: number;
  signal: number | null;
}

const enc = encodeURIComponent;
const text = new TextEncoder();

export class SessionTerminals {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  private get base(): string {
    return `/sessions/${enc(this.sessionId)}/terminals`;
  }

  /** Opens a terminal and attaches to it. */
  async create(opts: TerminalCreateOptions = {}): Promise<Terminal> {
    const body: Record<string, unknown> = { cols: opts.cols ?? 80, rows: opts.rows ?? 24 };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.command !== undefined) body.command = opts.command;
    const view = await this.t.json<TerminalView>('POST', this.base, { json: body, signal: opts.signal });
    return this.attach(view.termId, { mode: opts.mode, signal: opts.signal });
  }

  /** Attaches to an existing terminal: the screen first, then live output. */
  async attach(termId: string, opts: { mode?: 'control' | 'watch'; signal?: AbortSignal } = {}): Promise<Terminal> {
    const { ticket } = await this.t.json<TerminalTicketView>('POST', `${this.base}/${enc(termId)}/tickets`, { signal: opts.signal });
    const url = this.t.url(`${this.base}/${enc(termId)}`, { ticket, ...(opts.mode ? { mode: opts.mode } : {}) }).replace(/^http/, 'ws');
    const term = new Terminal({ url, termId, kill: (signal) => this.kill(termId, { signal }) });
    await term.opened(opts.signal);
    return term;
  }

  async list(opts: { signal?: AbortSignal } = {}): Promise<TerminalView[]> {
    return (await this.t.json<TerminalListView>('GET', this.base, { signal: opts.signal })).terminals;
  }

  get(termId: string, opts: { signal?: AbortSignal } = {}): Promise<TerminalView> {
    return this.t.json<TerminalView>('GET', `${this.base}/${enc(termId)}`, { signal: opts.signal });
  }

  /** Signals the terminal's process group (default SIGTERM; an interactive shell ignores it, use 9). */
  kill(termId: string, opts: { signal?: number; abort?: AbortSignal } = {}): Promise<TerminalKillView> {
    return this.t.json<TerminalKillView>('POST', `${this.base}/${enc(termId)}/kill`, { json: opts.signal === undefined ? {} : { signal: opts.signal }, signal: opts.abort });
  }

  /** The asciicast v2 recording (JSON lines). */
  async recording(termId: string, opts: { signal?: AbortSignal } = {}): Promise<string> {
    const { res } = await this.t.send('GET', `${this.base}/${enc(termId)}/recording`, { signal: opts.signal });
    return res.text();
  }
}

type Waiter = () => void;

/**
 * One attached client. Iterate it for output bytes (the screen first); `write` types (refused server-side
 * for a watcher: see `errors`), `resize` changes the window, `wait()` resolves with the exit.
 */
export class Terminal implements AsyncIterable<Uint8Array> {
  readonly termId: string;
  clientId = '';
  role: 'controller' | 'watcher' = 'watcher';
  cols = 0;
  rows = 0;
  /** Who holds the session's control lease (only they may type while it is held), or null. */
  leaseHolder: string | null = null;
  /** Errors the server sent for this client (e.g. forbidden / not_controller for a watcher's input). */
  readonly errors: AppError[] = [];
  private readonly ws: WebSocket;
  private readonly chunks: Uint8Array[] = [];
  private waiter: Waiter | null = null;
  private ended = false;
  private exit: TerminalExit | null = null;
  private closeError: AppError | null = null;
  private readonly exitWaiters: Array<[(x: TerminalExit) => void, (e: AppError) => void]> = [];
  private hello: Promise<void>;
  private readonly killFn: (signal?: number) => Promise<TerminalKillView>;

  constructor(o: { url: string; termId: string; kill: (signal?: number) => Promise<TerminalKillView> }) {
    this.termId = o.termId;
    this.killFn = o.kill;
    const WS = (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
    if (!WS) throw new AppError('unavailable', 'no WebSocket in this runtime (Node 22+ or a browser has one)');
    this.ws = new WS(o.url);
    this.ws.binaryType = 'arraybuffer';
    let helloOk!: () => void;
    let helloFail!: (e: AppError) => void;
    this.hello = new Promise<void>((res, rej) => ((helloOk = res), (helloFail = rej)));
    this.hello.catch(() => undefined);
    this.ws.onmessage = (ev: MessageEvent) => {
      if (typeof ev.data !== 'string') {
        this.chunks.push(new Uint8Array(ev.data as ArrayBuffer));
        return this.poke();
      }
      const msg = JSON.parse(ev.data) as TerminalServerMessage;
      if (msg.type === 'hello') {
        Object.assign(this, { clientId: msg.clientId, role: msg.role, cols: msg.cols, rows: msg.rows, leaseHolder: msg.leaseHolder ?? null });
        helloOk();
      } else if (msg.type === 'role') Object.assign(this, { role: msg.role, leaseHolder: msg.leaseHolder ?? null });
      else if (msg.type === 'resize') Object.assign(this, { cols: msg.cols, rows: msg.rows });
      else if (msg.type === 'exit') this.exit = { code: msg.code, signal: msg.signal };
      else if (msg.type === 'error') {
        const e = new AppError(msg.error.code as AppError['code'], msg.error.message, { details: msg.error.details });
        this.errors.push(e);
        helloFail(e);
      }
    };
    this.ws.onclose = (ev: CloseEvent) => {
      this.ended = true;
      if (!this.exit) {
        this.closeError = this.errors[this.errors.length - 1] ?? new AppError('unavailable', `terminal connection closed (${ev.code}${ev.reason ? ` ${ev.reason}` : ''}): attach again`, { retryable: true, details: { closeCode: ev.code } });
      }
      helloFail(this.closeError ?? new AppError('unavailable', 'terminal connection closed'));
      for (const [ok, fail] of this.exitWaiters.splice(0)) (this.exit ? ok(this.exit) : fail(this.closeError!));
      this.poke();
    };
  }

  /** Resolves once the server has said hello (rejects with its error when the attach failed). */
  async opened(signal?: AbortSignal): Promise<void> {
    if (!signal) return this.hello;
    await Promise.race([this.hello, new Promise<never>((_r, rej) => signal.addEventListener('abort', () => rej(new AppError('cancelled', 'cancelled')), { once: true }))]);
  }

  private poke(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** Types bytes (a string is sent as UTF-8). */
  write(data: string | Uint8Array): void {
    if (this.ended) throw this.closeError ?? new AppError('invalid_state', 'the terminal has ended');
    this.ws.send(typeof data === 'string' ? text.encode(data) : data);
  }

  resize(cols: number, rows: number): void {
    if (this.ended) throw this.closeError ?? new AppError('invalid_state', 'the terminal has ended');
    this.ws.send(JSON.stringify({ type: 'resize', cols, rows }));
    this.cols = cols;
    this.rows = rows;
  }

  /**
   * Asks for input; granted (role becomes 'controller') when nobody holds it. While someone else holds the
   * session's control lease the server refuses (an error forbidden / control_lease_held in `errors`).
   */
  takeControl(): void {
    this.ws.send(JSON.stringify({ type: 'control' }));
  }

  /** Resolves with the exit once the terminal ends; rejects when the connection is lost first. */
  wait(): Promise<TerminalExit> {
    if (this.exit && this.ended) return Promise.resolve(this.exit);
    if (this.ended) return Promise.reject(this.closeError);
    return new Promise((ok, fail) => this.exitWaiters.push([ok, fail]));
  }

  /** Signals the terminal's process group (default SIGTERM). */
  kill(signal?: number): Promise<TerminalKillView> {
    return this.killFn(signal);
  }

  /** Detaches this client; the terminal runs on. */
  close(): void {
    this.ws.close(1000);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const c = this.chunks.shift();
      if (c) {
        yield c;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }
}
