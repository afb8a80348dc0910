import { AppError } from '../core/errors.js';
import type { FileEntry, FileStat } from '../core/sandbox.js';
import type {
  CreatedSessionView,
  FileListView,
  FileWriteView,
  OkView,
  SessionView,
  SnapshotView,
  TerminatedView,
} from '../protocol/types.js';
import type { TarPushView, WatchEventType, WatchLine } from '../protocol/processes.js';
import { fromWireError } from '../protocol/errors.js';

/** A file system event from files.watch(). */
export interface WatchLineEvent {
  type: WatchEventType;
  path: string;
  isDir: boolean;
}
import { Execution, type ExecOptions, type ExecResult } from './exec.js';
import type { Transport } from './http.js';
import { SessionPorts } from './ports.js';
import { BackgroundProcess, SessionProcesses } from './processes.js';
import { SessionTerminals } from './terminals.js';
import { SessionDesktopView } from './desktop-view.js';
import { SessionDesktop } from './desktop.js';
import { toBody, type BytesSource } from './streams.js';

export interface CallOpts {
  signal?: AbortSignal;
}

export interface RunOptions extends ExecOptions {
  /** Largest combined stdout+stderr kept, bytes; beyond it the command is killed and run() throws payload_too_large. Default 64 MiB. */
  maxOutputBytes?: number;
}

export interface RunResult extends ExecResult {
  /** stdout decoded as UTF-8. */
  stdout: string;
  stderr: string;
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
}

const enc = (s: string) => encodeURIComponent(s);

/** A session handle. `info` is the last view the server sent; refresh() fetches a new one. */
export class Session {
  readonly id: string;
  /** The agent token: only set on handles returned by create and fork (the server shows it once). */
  readonly agentToken: string | null;
  info: SessionView;
  readonly files: SessionFiles;
  /** Background processes (they outlive every stream; the sandbox keeps their output). */
  readonly processes: SessionProcesses;
  /** Servers listening inside the sandbox: proxy URLs, and (Node entry) local forwards. */
  readonly ports: SessionPorts;
  /** Terminals (PTYs kept in the sandbox): create, attach, list, kill, recording. */
  readonly terminals: SessionTerminals;
  /** A desktop session's live view: the VNC WebSocket URL (with a single-use ticket). */
  readonly desktopView: SessionDesktopView;
  /** A desktop session's screen and its recording (a video kept in the machine). */
  readonly desktop: SessionDesktop;

  constructor(
    private readonly t: Transport,
    view: SessionView | CreatedSessionView,
  ) {
    const { agentToken, ...info } = view as CreatedSessionView;
    this.id = info.id;
    this.agentToken = agentToken ?? null;
    this.info = info;
    this.files = new SessionFiles(t, info.id);
    this.processes = new SessionProcesses(t, info.id);
    this.ports = new SessionPorts(t, info.id);
    this.terminals = new SessionTerminals(t, info.id);
    this.desktopView = new SessionDesktopView(t, info.id);
    this.desktop = new SessionDesktop(t, info.id);
  }

  get state(): SessionView['state'] {
    return this.info.state;
  }

  private path(suffix = ''): string {
    return `/sessions/${enc(this.id)}${suffix}`;
  }

  private async lifecycle(verb: 'pause' | 'resume' | 'hibernate' | 'wake', opts: CallOpts): Promise<SessionView> {
    this.info = await this.t.json<SessionView>('POST', this.path(`/${verb}`), { json: {}, signal: opts.signal, deadline: false });
    return this.info;
  }

  async refresh(opts: CallOpts = {}): Promise<SessionView> {
    this.info = await this.t.json<SessionView>('GET', this.path(), { signal: opts.signal });
    return this.info;
  }
  pause(opts: CallOpts = {}): Promise<SessionView> {
    return this.lifecycle('pause', opts);
  }
  resume(opts: CallOpts = {}): Promise<SessionView> {
    return this.lifecycle('resume', opts);
  }
  /** Checkpoints the machine to disk and frees its RAM; may take a while (no client deadline applies). */
  hibernate(opts: CallOpts = {}): Promise<SessionView> {
    return this.lifecycle('hibernate', opts);
  }
  wake(opts: CallOpts = {}): Promise<SessionView> {
    return this.lifecycle('wake', opts);
  }
  snapshot(opts: CallOpts & { name?: string } = {}): Promise<SnapshotView> {
    return this.t.json<SnapshotView>('POST', this.path('/snapshots'), { json: opts.name === undefined ? {} : { name: opts.name }, signal: opts.signal, deadline: false, idempotent: true });
  }
  async terminate(opts: CallOpts = {}): Promise<void> {
    await this.t.json<TerminatedView>('DELETE', this.path(), { signal: opts.signal, deadline: false });
    this.info = { ...this.info, state: 'terminated' };
  }

  /**
   * Starts a command and resolves once it runs; iterate the result for output, then wait(). Leaving the
   * stream stops the command. With `background: true` it runs on by itself instead: the answer comes at
   * once as a BackgroundProcess (output kept in the sandbox, see session.processes).
   */
  exec(argv: string[], opts: Omit<ExecOptions, 'stdin'> & { background: true }): Promise<BackgroundProcess>;
  exec(argv: string[], opts?: ExecOptions & { background?: false }): Promise<Execution>;
  exec(argv: string[], opts: ExecOptions & { background?: boolean } = {}): Promise<Execution | BackgroundProcess> {
    const { background, ...rest } = opts;
    if (background) return this.processes.start(argv, rest);
    return Execution.start(this.t, this.id, argv, rest);
  }

  /** Runs a command to the end and collects its output. */
  async run(argv: string[], opts: RunOptions = {}): Promise<RunResult> {
    const max = opts.maxOutputBytes ?? 64 * 1024 * 1024;
    const ex = await this.exec(argv, opts);
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    let total = 0;
    for await (const ev of ex) {
      total += ev.data.byteLength;
      if (total > max) {
        await ex.kill().catch(() => undefined);
        throw new AppError('payload_too_large', `output exceeded maxOutputBytes (${max})`, { details: { maxOutputBytes: max } });
      }
      (ev.type === 'stdout' ? out : err).push(ev.data);
    }
    const exit = await ex.wait();
    const stdoutBytes = concat(out);
    const stderrBytes = concat(err);
    const dec = new TextDecoder();
    return { ...exit, stdout: dec.decode(stdoutBytes), stderr: dec.decode(stderrBytes), stdoutBytes, stderrBytes };
  }

  /** The view, plus the agent token when this handle has one: what `--json` prints. */
  toJSON(): SessionView | CreatedSessionView {
    return this.agentToken ? { ...this.info, agentToken: this.agentToken } : this.info;
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/** Files inside a session. Paths are absolute. Transfers stream both ways and have no client deadline. */
export class SessionFiles {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  private get base(): string {
    return `/sessions/${enc(this.sessionId)}/files`;
  }

  /**
   * Writes atomically (the file appears whole or not at all). An async iterable is streamed as it is
   * produced. Missing parent directories are created; `parents: false` makes that an error (not_found).
   */
  write(path: string, data: BytesSource, opts: CallOpts & { mode?: number; parents?: boolean } = {}): Promise<FileWriteView> {
    const mode = opts.mode === undefined ? undefined : opts.mode.toString(8).padStart(3, '0');
    const parents = opts.parents === false ? 'false' : undefined;
    return this.t.json<FileWriteView>('PUT', this.base, { query: { path, mode, parents }, body: toBody(data), signal: opts.signal, deadline: false });
  }

  /** rename(2) inside the sandbox: atomic, same file system; replaces a file at `to`. */
  async move(from: string, to: string, opts: CallOpts = {}): Promise<void> {
    await this.t.json<OkView>('POST', `${this.base}/move`, { json: { from, to }, signal: opts.signal });
  }

  /** Unpacks a tar stream into dir (made with its parents): modes and symlinks kept, streamed as produced. */
  pushTar(dir: string, tar: BytesSource, opts: CallOpts = {}): Promise<TarPushView> {
    return this.t.json<TarPushView>('PUT', `${this.base}/tar`, { query: { path: dir }, body: toBody(tar), signal: opts.signal, deadline: false });
  }

  /**
   * File system events under path (recursive: the whole tree) as they happen, until the loop stops or the
   * signal aborts. The watch is in place when the first event could be produced: changes made after the
   * iteration has started are seen.
   */
  watch(path: string, opts: CallOpts & { recursive?: boolean } = {}): AsyncIterable<WatchLineEvent> {
    const t = this.t;
    const base = this.base;
    return {
      async *[Symbol.asyncIterator]() {
        const { res, signal } = await t.send('GET', `${base}/watch`, { query: { path, recursive: opts.recursive ? 'true' : undefined }, signal: opts.signal, deadline: false });
        if (!res.body) return;
        const dec = new TextDecoder();
        let buf = '';
        try {
          for await (const chunk of res.body) {
            buf += dec.decode(chunk, { stream: true });
            for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
              const l = JSON.parse(buf.slice(0, nl)) as WatchLine;
              buf = buf.slice(nl + 1);
              if (l.type === 'error') throw fromWireError({ error: l.error }, 200);
              if (l.type === 'event') yield { type: l.event, path: l.path, isDir: l.isDir };
            }
          }
        } catch (e) {
          throw t.failure(e, signal, `watch ${path}`);
        }
      },
    };
  }

  /** The directory as a tar stream (paths relative to it), as it arrives. Errors surface on iteration. */
  pullTar(dir: string, opts: CallOpts = {}): AsyncIterable<Uint8Array> {
    const t = this.t;
    const base = this.base;
    return {
      async *[Symbol.asyncIterator]() {
        const { res, signal } = await t.send('GET', `${base}/tar`, { query: { path: dir }, signal: opts.signal, deadline: false });
        if (!res.body) return;
        try {
          for await (const chunk of res.body) yield chunk;
        } catch (e) {
          throw t.failure(e, signal, `pull ${dir}`);
        }
      },
    };
  }

  /**
   * The file's bytes as they arrive. The request starts on the first iteration, so errors (not_found)
   * are thrown from there. Stopping early cancels the transfer.
   */
  read(path: string, opts: CallOpts = {}): AsyncIterable<Uint8Array> {
    const t = this.t;
    const base = this.base;
    return {
      async *[Symbol.asyncIterator]() {
        const { res, signal } = await t.send('GET', base, { query: { path }, signal: opts.signal, deadline: false });
        if (!res.body) return;
        try {
          for await (const chunk of res.body) yield chunk;
        } catch (e) {
          throw t.failure(e, signal, `read ${path}`);
        }
      },
    };
  }

  /** The whole file in memory; `maxBytes` (default 256 MiB) guards against surprises. */
  async readBytes(path: string, opts: CallOpts & { maxBytes?: number } = {}): Promise<Uint8Array> {
    const max = opts.maxBytes ?? 256 * 1024 * 1024;
    const chunks: Uint8Array[] = [];
    let n = 0;
    for await (const c of this.read(path, opts)) {
      n += c.byteLength;
      if (n > max) throw new AppError('payload_too_large', `${path} is larger than maxBytes (${max})`, { details: { maxBytes: max } });
      chunks.push(c);
    }
    return concat(chunks);
  }

  async readText(path: string, opts: CallOpts & { maxBytes?: number } = {}): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, opts));
  }

  async list(path: string, opts: CallOpts = {}): Promise<FileEntry[]> {
    return (await this.t.json<FileListView>('GET', `${this.base}/list`, { query: { path }, signal: opts.signal })).entries;
  }
  stat(path: string, opts: CallOpts = {}): Promise<FileStat> {
    return this.t.json<FileStat>('GET', `${this.base}/stat`, { query: { path }, signal: opts.signal });
  }
  async mkdir(path: string, opts: CallOpts & { parents?: boolean } = {}): Promise<void> {
    await this.t.json<OkView>('POST', `${this.base}/mkdir`, { json: { path, parents: opts.parents ?? false }, signal: opts.signal });
  }
  async rm(path: string, opts: CallOpts & { recursive?: boolean } = {}): Promise<void> {
    await this.t.json<OkView>('DELETE', this.base, { query: { path, recursive: opts.recursive ?? false }, signal: opts.signal });
  }
}
