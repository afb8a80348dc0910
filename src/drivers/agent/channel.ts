/**
 * AgentChannel: the host end of the berth-agent protocol (PROTOCOL.md) over one pair of byte streams,
 * e.g. the two FIFOs of a gVisor sandbox or the unix socket of a QEMU virtio-serial port.
 *
 * The agent runs inside the sandbox, so everything it sends is treated as untrusted input: lines are
 * bounded, ids must name a request in flight, numbers are checked, and memory is bounded by flow
 * control (read credits, stdin window, pausing the input while a consumer lags).
 */
import { randomBytes } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { AppError, InvalidArgumentError, SandboxError, TimeoutError, throwIfAborted } from '../../core/errors.js';
import type {
  CallOptions,
  ExecHandle,
  ExecRequest,
  FileEntry,
  FileStat,
  ProcessInfo,
  ProcessOutputEvent,
  ProcessOutputOptions,
  SandboxIdentity,
  TcpConnectionHandler,
  WatchEvent,
} from '../../core/sandbox.js';
import { AgentExecHandle } from './exec-handle.js';
import { runGuarded, type GuardHost } from './guard.js';
import { OutputRoute, V_J, WatchRoute, checkTag, notFoundProcess, parseJob, validateExec } from './processes.js';
import { ChannelSockets, V_n } from './sockets.js';
import { ReadRoute, sendFileData } from './stream-route.js';
import { AgentTerminals } from './terminals.js';
import {
  AGENT_PROTOCOL_MIN,
  AGENT_PROTOCOL_VERSION,
  MAX_LINE,
  MAX_LIST_ENTRIES,
  LineSplitter,
  ReplyRoute,
  SP,
  V,
  asBuffer,
  checkPath,
  dec,
  deferred,
  enc,
  num,
  raceAbort,
  statFields,
  type Deferred,
  type Link,
  type Route,
} from './wire.js';

export { AGENT_PROTOCOL_VERSION, agentError, LineSplitter } from './wire.js';
export { MAX_PROCESSES, RING_BYTES } from './processes.js';

export interface AgentChannelConnectOptions {
  /** Bytes from the agent. */
  input: Readable;
  /** Bytes to the agent. */
  output: Writable;
  signal?: AbortSignal;
  /** How often the hello is repeated until the agent answers, ms. Default 200. */
  helloIntervalMs?: number;
  /** Deadline for the agent's answer (also the default deadline of ping()), ms. Default 10000. */
  timeoutMs?: number;
  /**
   * Output a command may buffer while nobody iterates its handle, bytes; beyond it that command's output is
   * dropped (its exit still arrives). A handle being iterated applies back-pressure instead. Default 64 MiB.
   */
  maxUnconsumedBytes?: number;
  /**
   * The handler for a connection a sandbox listener accepted on a port this channel has not listen()ed on
   * itself: the driver's registry, so listeners outlive a channel (wake, server restart). Default: none
   * (such a connection is reset).
   */
  acceptTcp?: (port: number) => TcpConnectionHandler | undefined;
}

export interface AgentChannelCloseInfo {
  /** 'eof'/'error': the input stream ended or failed; 'closed': close() was called. */
  reason: 'eof' | 'error' | 'closed';
  error: AppError;
}

/** What the agent said about itself in its hello answer. */
export interface AgentInfo {
  version: number;
  /** The agent's pid inside the sandbox (1 under gVisor). */
  pid: number;
}

// ---- the channel -----------------------------------------------------------------------------------

export class AgentChannel {
  private agent: AgentInfo = { version: 0, pid: 0 };
  private readonly input: Readable;
  private readonly output: Writable;
  private readonly timeoutMs: number;
  private readonly maxUnconsumedBytes: number;
  /** TCP streams (PROTOCOL.md, "Sockets"): openTcp, listen, unlisten, listeners (sockets.ts). */
  readonly sockets: ChannelSockets;
  private readonly routes = new Map<number, Route>();
  private readonly hellos = new Map<string, Deferred<AgentInfo & { nextId: number }>>();
  private readonly holders = new Set<object>();
  private readonly closeListeners: Array<(info: AgentChannelCloseInfo) => void> = [];
  private readonly splitter = new LineSplitter({ maxLine: MAX_LINE, onLine: (l) => this.onLine(l) });
  private nextId = 1;
  private closed: AgentChannelCloseInfo | null = null;
  private drain: Deferred<void> | null = null;
  /** Guard lines (guard.ts) that go out in front of the next line sent. */
  private guardLines: string | undefined;
  private readonly guardHost: GuardHost = {
    version: () => this.agent.version,
    assertOpen: () => this.assertOpen(),
    newId: () => this.nextId++,
    addRoute: (id, r) => this.routes.set(id, r),
    release: (id) => this.routes.delete(id),
    pending: (lines) => {
      const before = this.guardLines;
      this.guardLines = lines;
      return before;
    },
    realpath: (path, signal) => this.realpath(path, signal ? { signal } : {}),
  };
  private readonly link: Link = {
    send: (line) => this.send(line),
    sendFlow: (line, signal) => this.sendFlow(line, signal),
    release: (id) => this.routes.delete(id),
    hold: (holder, on) => this.hold(holder, on),
  };

  private readonly onData = (chunk: Buffer | string): void =>
    this.splitter.push(typeof chunk === 'string' ? Buffer.from(chunk, 'latin1') : chunk);
  private readonly onEnd = (): void =>
    this.shutdown('eof', new SandboxError('the agent channel ended', { retryable: true }));
  private readonly onError = (e: Error): void =>
    this.shutdown('error', new SandboxError(`the agent channel failed: ${e.message}`, { retryable: true, cause: e }));
  private readonly onDrain = (): void => {
    this.drain?.resolve();
    this.drain = null;
  };

  private constructor(opts: AgentChannelConnectOptions) {
    this.input = opts.input;
    this.output = opts.output;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.maxUnconsumedBytes = opts.maxUnconsumedBytes ?? 64 << 20;
    this.sockets = new ChannelSockets({
      link: this.link,
      newId: () => this.nextId++,
      addRoute: (id, r) => this.routes.set(id, r),
      hasRoute: (id) => this.routes.has(id),
      call: (line, route, signal) => this.call(line, route, signal),
      assertOpen: () => this.assertOpen(),
      acceptTcp: opts.acceptTcp ?? (() => undefined),
    });
    this.input.on('data', this.onData);
    this.input.on('end', this.onEnd);
    this.input.on('close', this.onEnd);
    this.input.on('error', this.onError);
    this.output.on('error', this.onError);
    this.output.on('close', this.onEnd);
    this.output.on('drain', this.onDrain);
    this.input.resume(); // an earlier channel's close() paused it; a 'data' listener alone does not undo that
  }

  /** The agent's own description, from its hello answer. */
  get info(): AgentInfo {
    return this.agent;
  }

  /**
   * Says hello (`H <nonce> 1`, which also makes the agent abandon whatever an earlier host left in
   * flight) every helloIntervalMs until the matching answer, ignoring every line before it.
   */
  static async connect(opts: AgentChannelConnectOptions): Promise<AgentChannel> {
    const interval = opts.helloIntervalMs ?? 200;
    const timeout = opts.timeoutMs ?? 10_000;
    for (const [k, v] of [['helloIntervalMs', interval], ['timeoutMs', timeout], ['maxUnconsumedBytes', opts.maxUnconsumedBytes ?? 1]] as const) {
      if (!Number.isFinite(v) || v <= 0) throw new InvalidArgumentError(`${k} must be a positive number`, { details: { [k]: v } });
    }
    throwIfAborted(opts.signal);
    const ch = new AgentChannel(opts);
    try {
      const hello = await ch.hello({ reset: true, repeatMs: interval, timeoutMs: timeout, signal: opts.signal });
      if (hello.version < AGENT_PROTOCOL_MIN || hello.version > AGENT_PROTOCOL_VERSION) {
        throw new SandboxError(`the agent speaks protocol ${hello.version}; this host speaks ${AGENT_PROTOCOL_MIN} to ${AGENT_PROTOCOL_VERSION}`);
      }
      ch.agent = Object.freeze({ version: hello.version, pid: hello.pid });
      ch.nextId = Math.max(ch.nextId, hello.nextId);
      return ch;
    } catch (e) {
      ch.close();
      throw e;
    }
  }

  /** Round trip to the agent (H/h); resolves with the time it took, ms. */
  async ping(opts: CallOptions = {}): Promise<number> {
    const t0 = performance.now();
    await this.hello({ reset: false, repeatMs: 0, timeoutMs: this.timeoutMs, signal: opts.signal });
    return performance.now() - t0;
  }

  /** Registers a callback for the end of the channel (input ended or failed, or close()). */
  onClose(cb: (info: AgentChannelCloseInfo) => void): void {
    if (this.closed) {
      const info = this.closed;
      queueMicrotask(() => cb(info));
    } else {
      this.closeListeners.push(cb);
    }
  }

  /** Stops using the streams (they stay open: their owner ends them). Pending requests fail. */
  close(): void {
    this.shutdown('closed', new SandboxError('the agent channel was closed', { retryable: true }));
  }

  // ---- commands ----

  /**
   * Starts a command; resolves once the agent has forked it. Aborting opts.signal kills the command's
   * process group (SIGKILL); the handle then still reports the real exit.
   */
  async exec(req: ExecRequest, opts: CallOptions = {}): Promise<ExecHandle> {
    const { signal } = opts;
    validateExec(req);
    this.assertOpen();
    throwIfAborted(signal);
    const id = this.nextId++;
    const handle = new AgentExecHandle({ id, link: this.link, stdin: req.stdin === true, maxUnconsumedBytes: this.maxUnconsumedBytes });
    this.routes.set(id, handle);
    const env = Object.entries(req.env ?? {});
    const line = [
      'X', id, req.stdin ? 1 : 0, req.timeoutMs ?? 0, enc(req.cwd ?? ''), req.argv.length, ...req.argv.map(enc),
      env.length, ...env.map(([k, v]) => enc(`${k}=${v}`)),
    ].join(' ');
    this.send(`${line}\n`);
    if (signal) {
      const onAbort = (): void => void handle.kill(9).catch(() => undefined);
      signal.addEventListener('abort', onAbort, { once: true });
      handle.onDone(() => signal.removeEventListener('abort', onAbort));
    }
    try {
      await raceAbort(handle.started.promise, signal);
    } catch (e) {
      if (signal?.aborted) handle.abandon(); // the K sent by onAbort follows X, so the agent kills it
      throw e;
    }
    return handle;
  }

  // ---- background processes (PROTOCOL.md, "Background processes") ----

  /** Starts a background command named execId; resolves with its pid once forked. */
  async startProcess(execId: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ pid: number }> {
    validateExec(req);
    checkTag(execId);
    if (req.stdin) throw new InvalidArgumentError('a background command has no stdin', { details: { stdin: true } });
    const env = Object.entries(req.env ?? {});
    const route = new ReplyRoute<{ pid: number }>(undefined, (verb, f) => (verb === V.r ? { pid: num(f[1]) } : undefined));
    return this.call((id) => [
      'B', id, enc(execId), 0, req.timeoutMs ?? 0, enc(req.cwd ?? ''), req.argv.length, ...req.argv.map(enc),
      env.length, ...env.map(([k, v]) => enc(`${k}=${v}`)),
    ].join(' ') + '\n', route, opts.signal);
  }

  /** The agent's background process records, newest first. */
  async listProcesses(opts: CallOptions = {}): Promise<ProcessInfo[]> {
    const out: ProcessInfo[] = [];
    const route = new ReplyRoute<ProcessInfo[]>(undefined, (verb, f) => {
      if (verb === V_J) out.push(parseJob(f));
      if (verb !== V.r) return undefined;
      if (num(f[1]) !== out.length) throw new SandboxError('process listing lost records');
      return out;
    });
    return this.call((id) => `J ${id}\n`, route, opts.signal);
  }

  /** Streams a background command's rings from the given offsets (then live, with follow). */
  async processOutput(execId: string, opts: ProcessOutputOptions = {}): Promise<AsyncIterable<ProcessOutputEvent>> {
    checkTag(execId);
    const so = opts.stdoutOffset ?? 0;
    const eo = opts.stderrOffset ?? 0;
    for (const [k, v] of [['stdoutOffset', so], ['stderrOffset', eo]] as const) {
      if (!Number.isSafeInteger(v) || v < 0) throw new InvalidArgumentError(`${k} must be a non-negative integer`, { details: { [k]: v } });
    }
    const line = (id: number) => `O ${id} ${enc(execId)} ${so} ${eo} ${opts.follow ? 1 : 0}\n`;
    return (await this.openStream((id) => new OutputRoute({ id, execId, link: this.link, signal: opts.signal }), line, opts.signal)).iterable();
  }

  /** Signals a background command's process group; false when it had already ended. */
  async killProcess(execId: string, opts: CallOptions & { signalNumber?: number } = {}): Promise<boolean> {
    checkTag(execId);
    const sig = opts.signalNumber ?? 15;
    if (!Number.isInteger(sig) || sig < 0 || sig > 64) throw new InvalidArgumentError('signal must be an integer from 0 to 64', { details: { signal: sig } });
    const route = new ReplyRoute<boolean>(undefined, (verb, f) => (verb === V.r ? f[1] === '1' : undefined));
    try {
      return await this.call((id) => `Z ${id} ${enc(execId)} ${sig}\n`, route, opts.signal);
    } catch (e) {
      throw notFoundProcess(e, execId);
    }
  }

  /** Terminals (PROTOCOL.md, "Terminals"): `T <id> <word> …`; their output and kill are `O` and `Z`. */
  readonly terminals = new AgentTerminals((line, route, signal) => this.call(line, route, signal));
  // ---- files ----

  /**
   * Streams a regular file. Resolves when the agent has opened it (so a missing file rejects here); the
   * iterable holds at most ~16 chunks of 48 KiB, granting more as it is consumed. Stopping the iteration
   * early (break) or aborting opts.signal closes the file in the agent.
   */
  async readFile(path: string, opts: CallOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    checkPath(path);
    this.assertOpen();
    throwIfAborted(opts.signal);
    const id = this.nextId++;
    const route = new ReadRoute({ id, path, link: this.link, signal: opts.signal });
    this.routes.set(id, route);
    this.send(`R ${id} ${enc(path)}\n`);
    try {
      await raceAbort(route.opened.promise, opts.signal);
    } catch (e) {
      route.cancel();
      throw e;
    }
    return route.iterable();
  }

  /**
   * Writes a file atomically (temporary file beside it, fsync, rename): it appears whole or not at all.
   * Honours the output stream's back-pressure. On abort or a failing data source the agent removes the
   * temporary file before this rejects. Resolves with the bytes written. mode: permission bits, default
   * 0o644, applied exactly (no umask).
   */
  async writeFile(path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number } = {}): Promise<number> {
    const { signal } = opts;
    const mode = opts.mode ?? 0o644;
    checkPath(path);
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new InvalidArgumentError('mode must be an integer from 0 to 0o7777', { details: { mode } });
    this.assertOpen();
    throwIfAborted(signal);
    const id = this.nextId++;
    const route = new ReplyRoute<number>(path, (verb, f) => (verb === V.r ? num(f[1]) : undefined));
    this.routes.set(id, route);
    this.send(`W ${id} ${enc(path)} ${mode.toString(8)}\n`);
    return sendFileData({ link: this.link, id, path, route, data, closed: () => this.closed !== null }, signal);
  }

  /** Directory entries (lstat of each; "." and ".." left out), sorted by name. */
  async list(path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    checkPath(path);
    const entries: FileEntry[] = [];
    const route = new ReplyRoute<FileEntry[]>(path, (verb, f) => {
      if (verb === V.e) {
        if (entries.length >= MAX_LIST_ENTRIES) throw new SandboxError(`${path} has more than ${MAX_LIST_ENTRIES} entries`);
        entries.push({ ...statFields(f), name: dec(f[4]).toString('utf8') });
        return undefined;
      }
      if (verb !== V.r) return undefined;
      if (num(f[1]) !== entries.length) throw new SandboxError(`listing of ${path} lost entries`);
      return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    });
    return this.call((id) => `L ${id} ${enc(path)}\n`, route, opts.signal);
  }

  /** lstat: a symlink is reported as itself. */
  async stat(path: string, opts: CallOptions = {}): Promise<FileStat> {
    checkPath(path);
    const name = path.replace(/\/+$/, '').split('/').pop() || '/';
    const route = new ReplyRoute<FileStat>(path, (verb, f) => (verb === V.s ? { path, name, ...statFields(f) } : undefined));
    return this.call((id) => `S ${id} ${enc(path)}\n`, route, opts.signal);
  }

  /** Canonical path with symlinks followed; the part below the deepest existing directory is lexical. */
  async realpath(path: string, opts: CallOptions = {}): Promise<string> {
    checkPath(path);
    const route = new ReplyRoute<string>(path, (verb, f) => (verb === V.p ? dec(f[0]).toString('utf8') : undefined));
    return this.call((id) => `P ${id} ${enc(path)}\n`, route, opts.signal);
  }

  /** mkdir; with parents, like `mkdir -p` (an existing directory is fine). mode default 0o755. */
  async mkdir(path: string, opts: CallOptions & { parents?: boolean; mode?: number } = {}): Promise<void> {
    checkPath(path);
    const mode = opts.mode ?? 0o755;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new InvalidArgumentError('mode must be an integer from 0 to 0o7777', { details: { mode } });
    const route = new ReplyRoute<true>(path, (verb) => (verb === V.r ? true : undefined));
    await this.call((id) => `M ${id} ${enc(path)} ${opts.parents ? 1 : 0} ${mode.toString(8)}\n`, route, opts.signal);
  }

  /** Removes a file, an empty directory, or (recursive) a whole tree. A missing path is not_found. */
  async remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    checkPath(path);
    const route = new ReplyRoute<true>(path, (verb) => (verb === V.r ? true : undefined));
    await this.call((id) => `U ${id} ${enc(path)} ${opts.recursive ? 1 : 0}\n`, route, opts.signal);
  }

  /** rename(2): atomic, within one file system. */
  async rename(from: string, to: string, opts: CallOptions = {}): Promise<void> {
    checkPath(from);
    checkPath(to);
    const route = new ReplyRoute<true>(from, (verb) => (verb === V.r ? true : undefined));
    await this.call((id) => `V ${id} ${enc(from)} ${enc(to)}\n`, route, opts.signal);
  }

  /** inotify under path (PROTOCOL.md, "Watches"); resolves once the watch is in place. */
  async watch(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<AsyncIterable<WatchEvent>> {
    checkPath(path);
    const line = (id: number) => `Y ${id} ${enc(path)} ${opts.recursive ? 1 : 0}\n`;
    const route = await this.openStream((id) => new WatchRoute({ id, path, link: this.link, signal: opts.signal }), line, opts.signal);
    return route.iterable();
  }

  // ---- machine ----

  /** Applies an identity: hostname, /etc/machine-id, seed mixed into the kernel pool, resume signal. */
  async identity(identity: SandboxIdentity, seed: Uint8Array, opts: CallOptions = {}): Promise<void> {
    const { hostname, machineId, generation, reason } = identity;
    if (!/^[A-Za-z0-9.-]{1,64}$/.test(hostname)) throw new InvalidArgumentError('hostname must be 1-64 of [A-Za-z0-9.-]', { details: { hostname } });
    if (!/^[0-9a-f]{32}$/.test(machineId)) throw new InvalidArgumentError('machineId must be 32 lower-case hex characters', { details: { machineId } });
    if (!Number.isSafeInteger(generation) || generation < 0) throw new InvalidArgumentError('generation must be a non-negative integer', { details: { generation } });
    if (!['create', 'wake', 'fork'].includes(reason)) throw new InvalidArgumentError('reason must be create, wake or fork', { details: { reason } });
    if (seed.length > 4096) throw new InvalidArgumentError('seed must be at most 4096 bytes');
    const s = seed.length ? asBuffer(seed).toString('base64') : '-';
    const route = new ReplyRoute<true>(undefined, (verb) => (verb === V.r ? true : undefined));
    await this.call((id) => `N ${id} ${enc(hostname)} ${enc(machineId)} ${generation} ${enc(reason)} ${s}\n`, route, opts.signal);
  }

  /**
   * Before a checkpoint: resolves once everything the agent had queued has reached us; the agent then
   * writes nothing and reads no command output until it receives the next line.
   */
  async quiesce(opts: CallOptions = {}): Promise<void> {
    const route = new ReplyRoute<true>(undefined, (verb) => (verb === V.r ? true : undefined));
    await this.call((id) => `Q ${id}\n`, route, opts.signal);
  }

  // ---- internals ----

  /** Sends a streaming request and waits for its first answer (route.opened); failing there cancels it. */
  private async openStream<R extends Route & { opened: Deferred<unknown>; cancel(): void }>(make: (id: number) => R, line: (id: number) => string, signal?: AbortSignal): Promise<R> {
    this.assertOpen();
    throwIfAborted(signal);
    const id = this.nextId++;
    const route = make(id);
    this.routes.set(id, route);
    this.send(line(id));
    try {
      await raceAbort(route.opened.promise, signal);
    } catch (e) {
      route.cancel();
      throw e;
    }
    return route;
  }

  private async call<T>(line: (id: number) => string, route: ReplyRoute<T>, signal?: AbortSignal): Promise<T> {
    this.assertOpen();
    throwIfAborted(signal);
    const id = this.nextId++;
    this.routes.set(id, route);
    try {
      this.send(line(id));
      return await raceAbort(route.d.promise, signal);
    } finally {
      this.routes.delete(id);
    }
  }

  private async hello(o: { reset: boolean; repeatMs: number; timeoutMs: number; signal?: AbortSignal }): Promise<AgentInfo & { nextId: number }> {
    this.assertOpen();
    const nonce = randomBytes(12).toString('base64');
    const d = deferred<AgentInfo & { nextId: number }>();
    this.hellos.set(nonce, d);
    const line = `H ${nonce}${o.reset ? ' 1' : ''}\n`;
    const say = (): void => {
      if (!this.closed) this.send(line);
    };
    say();
    const timer = o.repeatMs > 0 ? setInterval(say, o.repeatMs) : undefined;
    const deadline = AbortSignal.timeout(o.timeoutMs);
    try {
      return await raceAbort(d.promise, o.signal ? AbortSignal.any([o.signal, deadline]) : deadline);
    } catch (e) {
      if (deadline.aborted && !o.signal?.aborted) {
        throw new TimeoutError(`the agent did not answer within ${o.timeoutMs} ms`, { cause: e });
      }
      throw e;
    } finally {
      clearInterval(timer);
      this.hellos.delete(nonce);
    }
  }

  private onLine(line: Buffer): void {
    if (this.closed || line.length < 3 || line[1] !== SP) return;
    const verb = line[0]!;
    if (verb === V.h) return this.onHello(line.subarray(2).toString('latin1').split(' '));
    if (verb === V_n) return this.sockets.onAccepted(line);
    let i = 2;
    let id = 0;
    for (; i < line.length && line[i] !== SP; i++) {
      const digit = line[i]! - 0x30;
      if (digit < 0 || digit > 9 || i > 17) return;
      id = id * 10 + digit;
    }
    const route = this.routes.get(id);
    if (!route) return; // not ours (yet): from before our hello, or for a request already given up
    try {
      route.onLine(verb, line.subarray(Math.min(i + 1, line.length)));
    } catch (e) {
      this.routes.delete(id);
      route.onFail(e instanceof AppError ? e : new SandboxError('malformed line from the agent', { cause: e }));
    }
  }

  private onHello(f: string[]): void {
    const d = f[0] === undefined ? undefined : this.hellos.get(f[0]);
    if (!d) return;
    try {
      d.resolve({ version: num(f[1]), pid: num(f[2]), nextId: num(f[3]) });
    } catch {
      // a malformed answer is ignored like any other noise; the hello is repeated
    }
  }

  private send(line: string): void {
    if (this.closed) throw this.closed.error;
    const guard = this.guardLines;
    this.guardLines = undefined;
    this.output.write(guard === undefined ? line : guard + line);
  }

  /** guard.ts: runs `op` only if every path is canonical, checked in the op's own round trip. */
  guarded<T>(paths: readonly string[], op: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return runGuarded(this.guardHost, paths, op, signal);
  }

  /** Writes and, when the stream's buffer is full, waits for it to drain. */
  private async sendFlow(line: string, signal?: AbortSignal): Promise<void> {
    if (this.closed) throw this.closed.error;
    if (this.output.write(line)) return;
    this.drain ??= deferred<void>();
    await raceAbort(this.drain.promise, signal);
    const closed = this.closed as AgentChannelCloseInfo | null; // may have changed while we waited
    if (closed) throw closed.error;
  }

  /** A consumer that lags pauses the whole input (back-pressure reaches the agent, then the command). */
  private hold(holder: object, on: boolean): void {
    const was = this.holders.size;
    if (on) this.holders.add(holder);
    else this.holders.delete(holder);
    if (this.closed) return;
    if (!was && this.holders.size) this.input.pause();
    else if (was && !this.holders.size) this.input.resume();
  }

  private assertOpen(): void {
    if (this.closed) throw this.closed.error;
  }

  private shutdown(reason: AgentChannelCloseInfo['reason'], error: AppError): void {
    if (this.closed) return;
    this.closed = { reason, error };
    this.input.off('data', this.onData);
    this.input.off('end', this.onEnd);
    this.input.off('close', this.onEnd);
    this.input.off('error', this.onError);
    this.output.off('error', this.onError);
    this.output.off('close', this.onEnd);
    this.output.off('drain', this.onDrain);
    // Keep a listener so a late stream error is not an uncaught exception; the owner handles the stream.
    for (const s of [this.input, this.output]) if (!s.listeners('error').includes(ignoreError)) s.on('error', ignoreError);
    if (reason === 'closed') this.input.pause();
    this.drain?.resolve();
    for (const h of this.hellos.values()) h.reject(error);
    const routes = [...this.routes.values()];
    this.routes.clear();
    for (const r of routes) r.onFail(error);
    for (const cb of this.closeListeners.splice(0)) cb(this.closed);
  }
}

function ignoreError(): void {}
