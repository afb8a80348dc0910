/**
 * An in-memory SandboxDriver: a real implementation of the port for tests above it (engine, server, SDK,
 * CLI), run by the shared driver conformance suite like gVisor and QEMU. It needs no root and starts
 * nothing on the host.
 *
 * - Files live in a tree per sandbox (drivers/memory/fs.ts); `/dev/null` discards writes.
 * - exec runs the built-in command set of drivers/memory/shell.ts (`capabilities.userland: 'builtin'`):
 *   echo, cat, sh -c, sleep, exit N, sha256sum, … — no host binary is ever run.
 * - pause holds every command: no output, no exit and no wake-up from sleep until resume.
 * - checkpoint writes the file tree and identity to the image directory (`memory-image.bin` plus the
 *   `berth-image.json` manifest recovery looks for); restore reads it back, so one image restores into
 *   independent branches. Running commands are not carried over (`capabilities.liveMemory: false`).
 * - stats: cpuSeconds counts 1 ms per command run; memory is the bytes held in files plus 1 MiB.
 *
 * Fault injection (tests of the engine's failure paths): `failNext(op, error, { times, after, midway })`
 * makes calls of one port method throw `error`: the next `times` (default 1) calls, after letting `after`
 * (default 0) calls succeed; by default before doing anything, with `midway` (checkpoint and restore only)
 * half-way: a checkpoint leaves a partial image (no manifest), a restore leaves a started sandbox behind,
 * as a backend that dies in the middle would. `crash(sandboxId, reason)` makes a sandbox die on its own,
 * as an OOM kill would (onExit listeners are told).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { duplexPair, type Duplex } from 'node:stream';
import { deserialize, serialize } from 'node:v8';
import {
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  PathNotCanonicalError,
  PortClosedError,
  SandboxError,
  throwIfAborted,
  type BackendName,
  type CallOptions,
  type CheckpointResult,
  type DriverCapabilities,
  type ExecHandle,
  type ExecRequest,
  type FileEntry,
  type FileStat,
  type ProcessInfo,
  type ProcessOutputEvent,
  type ProcessOutputOptions,
  type SandboxDriver,
  type TerminalInfo,
  type TerminalRequest,
  type WatchEvent,
  type SandboxIdentity,
  type SandboxSpec,
  type SandboxStats,
  type TcpConnectionHandler,
  type TcpListener,
} from '../../core/index.js';
import { MemoryExec } from './exec.js';
import { MemoryFs, concat, type MemNode } from './fs.js';
import { ProcessTable, watchTree } from './processes.js';
import { MemoryTerminal } from './terminal.js';
import { EMPTY, runProgram, type ShellContext } from './shell.js';

/** The port methods failNext can make fail. */
export const MEMORY_DRIVER_OPS = [
  'probe', 'create', 'adopt', 'list', 'exec', 'readFile', 'writeFile', 'listFiles', 'stat', 'realpath', 'mkdir',
  'remove', 'rename', 'pause', 'resume', 'checkpoint', 'restore', 'stats', 'destroy', 'startProcess', 'listProcesses',
  'processOutput', 'killProcess', 'watchFiles', 'openTcp', 'listenTcp', 'openTerminal', 'listTerminals', 'writeTerminal', 'resizeTerminal',
] as const;
export type MemoryDriverOp = (typeof MEMORY_DRIVER_OPS)[number];

export interface MemoryDriverOptions {
  /** The backend name the driver answers to; the engine keys its drivers by it. Default 'gvisor'. */
  name?: BackendName;
  /** Capabilities over the defaults (fork, snapshotWhileRunning: true; liveMemory: false; minMemoryMb: 64). */
  capabilities?: Partial<DriverCapabilities>;
  /** Milliseconds since the epoch, for file times. Default Date.now. */
  now?: () => number;
  /** Called with every chunk writeFile receives, as it arrives (tests check that uploads stream). */
  onWriteChunk?: (sandboxId: string, path: string, chunk: Uint8Array) => void | Promise<void>;
}

const IMAGE_FILE = 'memory-image.bin';
const MANIFEST_FILE = 'berth-image.json';
const BASE_MEMORY = 1 << 20;

interface Fault {
  /** Calls still to let through before this one fails. */
  after: number;
  error: Error;
  midway: boolean;
}

interface Image {
  version: 1;
  root: MemNode;
  /** Background process records (absent in images written before they existed). */
  procs?: ReturnType<ProcessTable['snapshot']>;
  /** Ports listened on (listeners are part of the machine, as the agent's are). */
  ports?: number[];
}

/** As the agent's RING_MAX and BG_MAX. */
const RING_BYTES = 1 << 20;
const MAX_PROCESSES = 32;

class Box {
  paused: { promise: Promise<void>; resolve: () => void } | null = null;
  readonly jobs = new Set<AbortController>();
  readonly execs = new Set<MemoryExec>();
  /** Live terminals (their records are in procs). */
  readonly terms = new Map<string, { t: MemoryTerminal; size: { cols: number; rows: number } }>();
  cpuMs = 0;
  peak = 0;
  nextPid = 100;
  /** Loopback ports a listener holds inside this machine (listenTcp); connections are not kept. */
  readonly ports = new Set<number>();
  /** Connections open to or from the machine, reset when it stops. */
  readonly sockets = new Set<Duplex>();
  nextPort = 40000;
  constructor(
    readonly spec: SandboxSpec,
    readonly fs: MemoryFs,
    readonly procs: ProcessTable,
  ) {}
  running = (): Promise<void> => this.paused?.promise ?? Promise.resolve();
  /** Kills every command and background job (the machine stops). */
  stopAll(): void {
    for (const j of this.jobs) j.abort(new Error('the sandbox stopped'));
    this.jobs.clear();
    for (const e of this.execs) void e.kill(9);
    this.execs.clear();
    for (const s of this.sockets) s.destroy(new SandboxError('the sandbox stopped'));
    this.sockets.clear();
    this.paused?.resolve();
  }
}

export class MemoryDriver implements SandboxDriver {
  readonly name: BackendName;
  readonly capabilities: DriverCapabilities;
  private readonly boxes = new Map<string, Box>();
  private readonly listeners: Array<(sandboxId: string, reason: string) => void> = [];
  private readonly faults = new Map<MemoryDriverOp, Array<Fault>>();
  private readonly now: () => number;
  /** Handlers of listenTcp by sandbox and port: the host's side, which outlives a checkpoint/restore. */
  private readonly tcp = new Map<string, Map<number, TcpConnectionHandler>>();

  constructor(private readonly o: MemoryDriverOptions = {}) {
    this.name = o.name ?? 'gvisor';
    this.capabilities = Object.freeze({
      fork: true,
      liveMemory: false,
      snapshotWhileRunning: true,
      isolation: 'user-space-kernel' as const,
      userland: 'builtin' as const,
      processRingBytes: RING_BYTES,
      maxProcesses: MAX_PROCESSES,
      minMemoryMb: 64,
      writesInMemory: true,
      images: ['base'] as const,
      ...o.capabilities,
    });
    this.now = o.now ?? Date.now;
  }

  // ---- test controls --------------------------------------------------------------------------------

  /**
   * Calls of `op` throw `error`: `times` of them (default 1), after `after` successful ones (default 0).
   * With `midway` (checkpoint, restore) the call fails half-way instead of before doing anything.
   */
  failNext(op: MemoryDriverOp, error: Error, opts: { times?: number; after?: number; midway?: boolean } = {}): void {
    if (opts.midway && op !== 'checkpoint' && op !== 'restore') throw new TypeError('midway faults exist for checkpoint and restore only');
    const q = this.faults.get(op) ?? [];
    for (let i = 0; i < (opts.times ?? 1); i++) q.push({ error, after: i === 0 ? (opts.after ?? 0) : 0, midway: !!opts.midway });
    this.faults.set(op, q);
  }

  /** The sandbox dies on its own with this reason: its commands end and onExit listeners are told. */
  crash(sandboxId: string, reason = 'killed by the OOM killer'): void {
    const box = this.box(sandboxId);
    box.stopAll();
    this.boxes.delete(sandboxId);
    for (const l of this.listeners) l(sandboxId, reason);
  }

  /** Whether a sandbox exists (running or paused). */
  has(sandboxId: string): boolean {
    return this.boxes.has(sandboxId);
  }

  /** Throws an injected fault due now (before the call does anything), or returns one due half-way. */
  private fault(op: MemoryDriverOp, opts?: CallOptions): Error | undefined {
    throwIfAborted(opts?.signal);
    const q = this.faults.get(op);
    const f = q?.[0];
    if (!f) return undefined;
    if (f.after > 0) {
      f.after--;
      return undefined;
    }
    q.shift();
    if (f.midway) return f.error;
    throw f.error;
  }

  /** CallOptions.guard, as the agent checks it: every path must resolve to itself, or nothing runs. */
  private checkGuard(sandboxId: string, opts?: CallOptions): void {
    const fs = this.box(sandboxId).fs;
    for (const p of opts?.guard ?? []) {
      const real = ((): string | null => { try { return fs.realpath(p); } catch { return null; } })(); // prettier-ignore
      if (real !== p) throw new PathNotCanonicalError(p, real);
    }
  }

  private box(sandboxId: string): Box {
    const b = this.boxes.get(sandboxId);
    if (!b) throw new NotFoundError('sandbox', sandboxId);
    return b;
  }

  private start(spec: SandboxSpec, fs: MemoryFs, procs?: Image['procs'], ports?: number[]): void {
    if (this.boxes.has(spec.sandboxId)) throw new SandboxError(`sandbox ${spec.sandboxId} already exists`);
    const table = new ProcessTable({ ringBytes: this.capabilities.processRingBytes, max: this.capabilities.maxProcesses, now: this.now });
    if (procs) table.load(procs);
    const box = new Box(spec, fs, table);
    for (const p of ports ?? []) box.ports.add(p);
    this.applyIdentity(box, spec.identity);
    this.boxes.set(spec.sandboxId, box);
  }

  /** What the agent does on its `N` line: hostname, /etc/machine-id and the resume signal. */
  private applyIdentity(box: Box, id: SandboxIdentity): void {
    const text = (s: string) => new TextEncoder().encode(s);
    box.fs.mkdir('/etc', { parents: true });
    box.fs.mkdir('/run/berth', { parents: true });
    box.fs.writeFile('/etc/hostname', text(`${id.hostname}\n`));
    box.fs.writeFile('/etc/machine-id', text(`${id.machineId}\n`), { mode: 0o444 });
    const resume = { generation: id.generation, reason: id.reason, hostname: id.hostname, machineId: id.machineId };
    box.fs.writeFile('/run/berth/resume', text(`${JSON.stringify(resume)}\n`));
  }

  // ---- the port -------------------------------------------------------------------------------------

  async probe(opts?: CallOptions): Promise<void> {
    this.fault('probe', opts);
  }

  async create(spec: SandboxSpec, opts?: CallOptions): Promise<void> {
    this.fault('create', opts);
    this.start(spec, MemoryFs.fresh(this.now, spec.limits.diskMb === undefined ? undefined : spec.limits.diskMb * 1024 * 1024));
  }

  async adopt(spec: SandboxSpec, opts?: CallOptions): Promise<boolean> {
    this.fault('adopt', opts);
    return this.boxes.has(spec.sandboxId);
  }

  async list(opts?: CallOptions): Promise<string[]> {
    this.fault('list', opts);
    return [...this.boxes.keys()];
  }

  async exec(sandboxId: string, req: ExecRequest, opts?: CallOptions): Promise<ExecHandle> {
    this.fault('exec', opts);
    this.checkGuard(sandboxId, opts);
    if (req.argv.length === 0) throw new InvalidArgumentError('argv must be a non-empty array of strings', { details: { argv: req.argv } });
    const box = this.box(sandboxId);
    const h = new MemoryExec({ stdin: !!req.stdin, timeoutMs: req.timeoutMs });
    box.execs.add(h);
    const out = (type: 'stdout' | 'stderr') => async (d: Uint8Array) => {
      await box.running();
      h.emit(type, d);
    };
    const ctx: ShellContext = {
      fs: box.fs,
      hostname: () => box.spec.identity.hostname,
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: '/root', ...box.spec.env, ...req.env },
      cwd: req.cwd || '/',
      stdin: req.stdin ? h.stdin : EMPTY,
      stdout: out('stdout'),
      stderr: out('stderr'),
      signal: h.signal,
      running: box.running,
      spawnJob: (run) => {
        const ctl = new AbortController();
        box.jobs.add(ctl);
        void run(ctl.signal).finally(() => box.jobs.delete(ctl));
      },
      charge: () => void (box.cpuMs += 1),
      lastStatus: 0,
    };
    const done = async (code: number) => {
      await box.running();
      box.execs.delete(h);
      h.finish(code);
    };
    const cwdOk = (() => {
      try {
        return box.fs.get(ctx.cwd).type === 'dir';
      } catch {
        return false;
      }
    })();
    if (!cwdOk) {
      h.emit('stderr', new TextEncoder().encode(`chdir ${ctx.cwd}: No such file or directory\n`));
      void done(127);
      return h;
    }
    void runProgram(req.argv, ctx).then(done, async (e: unknown) => {
      if (!h.signal.aborted) h.emit('stderr', new TextEncoder().encode(`${req.argv[0]}: ${(e as Error).message}\n`));
      await done(1);
    });
    return h;
  }

  async startProcess(sandboxId: string, execId: string, req: ExecRequest, opts?: CallOptions): Promise<{ pid: number }> {
    this.fault('startProcess', opts);
    if (req.stdin) throw new InvalidArgumentError('a background command has no stdin', { details: { stdin: true } });
    const box = this.box(sandboxId);
    box.procs.admit(execId);
    const h = await this.exec(sandboxId, { ...req, stdin: false }, opts);
    const pid = box.nextPid++;
    box.procs.add(execId, req.argv, pid, h);
    return { pid };
  }

  async openTerminal(sandboxId: string, termId: string, req: TerminalRequest, opts?: CallOptions): Promise<{ pid: number }> {
    this.fault('openTerminal', opts);
    for (const k of ['cols', 'rows'] as const) {
      const v = req[k];
      if (!Number.isInteger(v) || v < 1 || v > 1000) throw new InvalidArgumentError(`${k} must be an integer from 1 to 1000`, { details: { [k]: v } });
    }
    const box = this.box(sandboxId);
    box.procs.admit(termId);
    const t = new MemoryTerminal({
      argv: req.argv ?? [],
      cols: req.cols,
      rows: req.rows,
      run: (argv) => this.exec(sandboxId, { argv, cwd: req.cwd, env: req.env, stdin: true }),
    });
    const pid = box.nextPid++;
    const size = { cols: req.cols, rows: req.rows };
    box.procs.add(termId, req.argv?.length ? req.argv : ['/bin/sh'], pid, t.handle, size);
    box.terms.set(termId, { t, size });
    t.start();
    return { pid };
  }

  async listTerminals(sandboxId: string, opts?: CallOptions): Promise<TerminalInfo[]> {
    this.fault('listTerminals', opts);
    return this.box(sandboxId).procs.listTerminals();
  }

  async writeTerminal(sandboxId: string, termId: string, data: Uint8Array, opts?: CallOptions): Promise<void> {
    this.fault('writeTerminal', opts);
    const box = this.box(sandboxId);
    const rec = box.procs.terminal(termId);
    const live = box.terms.get(termId);
    if (rec.info.state === 'exited' || !live || live.t.handle.exited) throw new InvalidStateError(`terminal ${termId} has ended`, { details: { termId } });
    await box.running();
    live.t.input(data);
  }

  async resizeTerminal(sandboxId: string, termId: string, size: { cols: number; rows: number }, opts?: CallOptions): Promise<void> {
    this.fault('resizeTerminal', opts);
    for (const k of ['cols', 'rows'] as const) {
      const v = size[k];
      if (!Number.isInteger(v) || v < 1 || v > 1000) throw new InvalidArgumentError(`${k} must be an integer from 1 to 1000`, { details: { [k]: v } });
    }
    const box = this.box(sandboxId);
    const rec = box.procs.terminal(termId);
    rec.terminal.cols = size.cols;
    rec.terminal.rows = size.rows;
    box.terms.get(termId)?.t.resize(size.cols, size.rows);
  }

  async listProcesses(sandboxId: string, opts?: CallOptions): Promise<ProcessInfo[]> {
    this.fault('listProcesses', opts);
    return this.box(sandboxId).procs.list();
  }

  async processOutput(sandboxId: string, execId: string, opts: ProcessOutputOptions = {}): Promise<AsyncIterable<ProcessOutputEvent>> {
    this.fault('processOutput', opts);
    return this.box(sandboxId).procs.output(execId, opts);
  }

  async killProcess(sandboxId: string, execId: string, opts: CallOptions & { signalNumber?: number } = {}): Promise<boolean> {
    this.fault('killProcess', opts);
    return this.box(sandboxId).procs.kill(execId, opts.signalNumber ?? 15);
  }

  async watchFiles(sandboxId: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<AsyncIterable<WatchEvent>> {
    this.fault('watchFiles', opts);
    const fs = this.box(sandboxId).fs;
    const root = fs.stat(path).path; // a missing path fails here, as inotify_add_watch would
    return watchTree(fs, root, !!opts.recursive, opts.signal);
  }

  /**
   * In-process TCP: a port is "listened on" inside the machine by listenTcp; openTcp to it makes a pair of
   * connected Duplexes (half-close and destroy behave as a socket's), one end for each side. Nothing is
   * opened on the host. A port no listener holds is refused, as ECONNREFUSED.
   */
  async openTcp(sandboxId: string, port: number, opts?: CallOptions): Promise<Duplex> {
    this.fault('openTcp', opts);
    checkPort(port, false);
    const box = this.box(sandboxId);
    await box.running();
    const handler = this.tcp.get(sandboxId)?.get(port);
    if (!box.ports.has(port)) throw new PortClosedError(port);
    const [ours, theirs] = duplexPair();
    for (const [s, peer] of [[ours, theirs], [theirs, ours]] as const) {
      box.sockets.add(s);
      s.once('close', () => {
        box.sockets.delete(s);
        // An end destroyed before both directions finished is a reset, as a socket's RST: the peer fails too.
        if (!(s.readableEnded && s.writableFinished) && !peer.destroyed) {
          peer.destroy(peer.listenerCount('error') ? new SandboxError(`port ${port}: connection reset`) : undefined);
        }
      });
    }
    if (handler) handler(theirs, { port, peerPort: box.nextPort++ });
    else theirs.destroy(); // the listener's host side is gone (a fork branch): accepted, then reset
    return ours;
  }

  async listenTcp(sandboxId: string, port: number, onConnection: TcpConnectionHandler, opts?: CallOptions): Promise<TcpListener> {
    this.fault('listenTcp', opts);
    checkPort(port, true);
    if (typeof onConnection !== 'function') throw new InvalidArgumentError('onConnection must be a function');
    const box = this.box(sandboxId);
    let bound = port;
    if (!bound) while (box.ports.has((bound = box.nextPort++)));
    box.ports.add(bound);
    let m = this.tcp.get(sandboxId);
    if (!m) this.tcp.set(sandboxId, (m = new Map()));
    m.set(bound, onConnection);
    return {
      port: bound,
      close: async () => {
        if (this.tcp.get(sandboxId)?.get(bound) !== onConnection) return;
        this.tcp.get(sandboxId)?.delete(bound);
        this.boxes.get(sandboxId)?.ports.delete(bound);
      },
    };
  }

  async rename(sandboxId: string, from: string, to: string, opts?: CallOptions): Promise<void> {
    this.fault('rename', opts);
    this.box(sandboxId).fs.rename(from, to);
  }

  async readFile(sandboxId: string, path: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>> {
    this.fault('readFile', opts);
    this.checkGuard(sandboxId, opts);
    const data = this.box(sandboxId).fs.readFile(path);
    return (async function* () {
      for (let off = 0; off < data.byteLength; off += 64 * 1024) yield data.subarray(off, off + 64 * 1024);
    })();
  }

  async writeFile(sandboxId: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number } = {}): Promise<number> {
    this.fault('writeFile', opts);
    this.checkGuard(sandboxId, opts);
    const box = this.box(sandboxId);
    box.fs.find(path); // the parent must exist before the data is taken
    const discard = box.fs.discards(path);
    const parts: Uint8Array[] = [];
    let total = 0;
    for await (const chunk of data) {
      throwIfAborted(opts.signal);
      await this.o.onWriteChunk?.(sandboxId, path, chunk);
      total += chunk.byteLength;
      if (!discard) parts.push(new Uint8Array(chunk));
    }
    // Atomic: the file appears whole, once every byte has arrived.
    box.fs.writeFile(path, concat(parts), { mode: opts.mode });
    return total;
  }

  async listFiles(sandboxId: string, path: string, opts?: CallOptions): Promise<FileEntry[]> {
    this.fault('listFiles', opts);
    this.checkGuard(sandboxId, opts);
    return this.box(sandboxId).fs.list(path);
  }

  async stat(sandboxId: string, path: string, opts?: CallOptions): Promise<FileStat> {
    this.fault('stat', opts);
    this.checkGuard(sandboxId, opts);
    return this.box(sandboxId).fs.stat(path);
  }

  async realpath(sandboxId: string, path: string, opts?: CallOptions): Promise<string> {
    this.fault('realpath', opts);
    return this.box(sandboxId).fs.realpath(path);
  }

  async mkdir(sandboxId: string, path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    this.fault('mkdir', opts);
    this.box(sandboxId).fs.mkdir(path, { parents: opts.parents });
  }

  async remove(sandboxId: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    this.fault('remove', opts);
    this.box(sandboxId).fs.remove(path, { recursive: opts.recursive });
  }

  async pause(sandboxId: string, opts?: CallOptions): Promise<void> {
    this.fault('pause', opts);
    const box = this.box(sandboxId);
    if (box.paused) return;
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    box.paused = { promise, resolve };
  }

  async resume(sandboxId: string, opts?: CallOptions): Promise<void> {
    this.fault('resume', opts);
    const box = this.box(sandboxId);
    const p = box.paused;
    box.paused = null;
    p?.resolve();
  }

  async checkpoint(sandboxId: string, imageDir: string, opts: CallOptions & { leaveRunning?: boolean } = {}): Promise<CheckpointResult> {
    const midway = this.fault('checkpoint', opts);
    const box = this.box(sandboxId);
    const image: Image = { version: 1, root: box.fs.root, procs: box.procs.snapshot(), ports: [...box.ports] };
    const bytes = serialize(image);
    await writeFile(join(imageDir, IMAGE_FILE), midway ? bytes.subarray(0, bytes.byteLength >> 1) : bytes);
    if (midway) throw midway;
    // The manifest last: its presence says the image is complete (engine/recovery.ts checks it).
    await writeFile(join(imageDir, MANIFEST_FILE), JSON.stringify({ version: 1, backend: 'memory' }));
    if (!opts.leaveRunning) {
      box.stopAll();
      this.boxes.delete(sandboxId);
    }
    return { bytes: bytes.byteLength };
  }

  /** The manifest is written last, after the image file: it marks a whole image. */
  async imageComplete(imageDir: string): Promise<boolean> {
    try {
      return (JSON.parse(await readFile(join(imageDir, MANIFEST_FILE), 'utf8')) as { backend?: unknown }).backend === 'memory';
    } catch {
      return false;
    }
  }

  async restore(spec: SandboxSpec, imageDir: string, opts?: CallOptions): Promise<void> {
    const midway = this.fault('restore', opts);
    let image: Image;
    try {
      image = deserialize(await readFile(join(imageDir, IMAGE_FILE))) as Image;
    } catch (e) {
      throw new SandboxError(`cannot read the image in ${imageDir}: ${(e as Error).message}`, { cause: e });
    }
    throwIfAborted(opts?.signal);
    this.start(spec, new MemoryFs(image.root as Extract<MemNode, { type: 'dir' }>, this.now), image.procs, image.ports);
    if (midway) throw midway;
  }

  async stats(sandboxId: string, opts?: CallOptions): Promise<SandboxStats> {
    this.fault('stats', opts);
    const box = this.box(sandboxId);
    const memoryBytes = BASE_MEMORY + box.fs.bytes();
    box.peak = Math.max(box.peak, memoryBytes);
    return { cpuSeconds: box.cpuMs / 1000, memoryBytes, peakMemoryBytes: box.peak };
  }

  async destroy(sandboxId: string, opts?: CallOptions): Promise<void> {
    this.fault('destroy', opts);
    this.boxes.get(sandboxId)?.stopAll();
    this.boxes.delete(sandboxId);
    this.tcp.delete(sandboxId);
  }

  onExit(listener: (sandboxId: string, reason: string) => void): void {
    this.listeners.push(listener);
  }

  /**
   * Commands cannot outlive the driver object (they are promises in this process), so close() ends them;
   * the machines' files stay, and a second engine over the same driver adopts them.
   */
  async close(): Promise<void> {
    for (const box of this.boxes.values()) {
      for (const j of box.jobs) j.abort(new Error('the driver closed'));
      box.jobs.clear();
      for (const e of box.execs) void e.kill(9);
      box.execs.clear();
    }
  }
}

function checkPort(port: number, allowZero: boolean): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535) {
    throw new InvalidArgumentError(`port must be an integer from ${allowZero ? 0 : 1} to 65535`, { details: { port } });
  }
}
