/**
 * The SandboxDriver port: the only way the engine touches a machine. gVisor (runsc) and QEMU implement
 * it in src/drivers; the engine never learns which one it holds. Every method is required; what a backend
 * can or cannot do is data in `capabilities`.
 */

import type { Duplex } from 'node:stream';
import type { ImageVariant } from './desktop.js';

/**
 * Every production backend, by name: the one place the names are spelled (the protocol's enum, the CLI's
 * choices, the server's default set and options validation derive from it). Each has a folder in
 * src/drivers and an entry in src/drivers/registry.ts, which the compiler holds to this list.
 */
export const BACKENDS = Object.freeze(['gvisor', 'qemu'] as const);
export type BackendName = (typeof BACKENDS)[number];

export function isBackendName(v: unknown): v is BackendName {
  return (BACKENDS as readonly unknown[]).includes(v);
}

export interface SandboxLimits {
  /** Memory limit, MiB. */
  memoryMb: number;
  /** CPU limit, in cores (may be fractional for gVisor; rounded up to whole vCPUs for QEMU). */
  cpus: number;
  /**
   * Room for the session's writes, MiB: a writer gets ENOSPC past it. Where writes live in memory
   * (capabilities.writesInMemory) a limit inside memoryMb; absent there, none of its own. Where they go to a
   * disk, the free room the machine's disk is grown to (at least the image's own); absent, the image's.
   */
  diskMb?: number;
}

/** Who the machine is. Fresh per session and per fork branch. */
export interface SandboxIdentity {
  hostname: string;
  /** 32 lower-case hex characters, written to /etc/machine-id. */
  machineId: string;
  /** Increases at every wake and fork; written with the resume signal. */
  generation: number;
  /** Why the identity was (re)applied: first boot, wake from hibernation, or a fork branch. */
  reason: 'create' | 'wake' | 'fork';
}

export interface SandboxSpec {
  /** Driver-level id of the sandbox; unique per live machine (a fork branch gets a new one). */
  sandboxId: string;
  limits: SandboxLimits;
  /** Environment given to every process the agent starts. */
  env: Record<string, string>;
  identity: SandboxIdentity;
  /** Network mode; only 'none' is supported by the default configuration. */
  network: 'none';
  /** The image the machine boots from (create only; a restore boots what its checkpoint recorded). */
  image: ImageVariant;
}

export interface ExecRequest {
  /** argv; argv[0] is looked up in PATH. */
  argv: string[];
  cwd?: string;
  /** Merged over the sandbox environment. */
  env?: Record<string, string>;
  /** Kill the command (its whole process group) after this many milliseconds. 0 or absent: no limit. */
  timeoutMs?: number;
  /** When false, the command's stdin is /dev/null. Default false. */
  stdin?: boolean;
}

export type ExecEvent =
  | { type: 'stdout'; data: Uint8Array }
  | { type: 'stderr'; data: Uint8Array }
  | { type: 'exit'; exit: ExecExit };

export interface ExecExit {
  /** Exit code; 128+signal when killed by a signal (shell convention). */
  code: number;
  /** Signal number when killed by one, else null. */
  signal: number | null;
  /** True when timeoutMs elapsed and the command was killed for it. */
  timedOut: boolean;
}

/** A running command. Output is an async iterable; wait() resolves with the exit. */
export interface ExecHandle extends AsyncIterable<ExecEvent> {
  writeStdin(data: Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  /** Sends a signal (default SIGKILL) to the command's process group. */
  kill(signal?: number): Promise<void>;
  wait(): Promise<ExecExit>;
}

/** A command started with startProcess: it runs on without a stream, its output kept inside the sandbox. */
export interface ProcessInfo {
  /** The name given at start (the engine's `exe_…` id); unique within the sandbox. */
  execId: string;
  pid: number;
  argv: string[];
  state: 'running' | 'exited';
  /** Set once state is 'exited'. */
  exit: ExecExit | null;
  /** Milliseconds since the epoch (the sandbox's clock). */
  startedAt: number;
  endedAt: number | null;
  /** Bytes the command has written to each stream since it started (the ring keeps the last ringBytes). */
  stdoutBytes: number;
  stderrBytes: number;
}

/**
 * A piece of a background command's output: `offset` is the stream byte offset of data[0] (counted from the
 * command's start), so a reader that resumes from offset + data.length misses and repeats nothing. A gap
 * between the offset asked for and the first one given means the ring had already dropped those bytes.
 */
export type ProcessOutputEvent =
  | { type: 'stdout' | 'stderr'; offset: number; data: Uint8Array }
  | { type: 'exit'; exit: ExecExit };

export interface ProcessOutputOptions extends CallOptions {
  /** Keep streaming live output until the command ends (or the iteration stops). Default false. */
  follow?: boolean;
  /** Stream byte offsets to start from. Default 0 (the oldest bytes the ring holds). */
  stdoutOffset?: number;
  stderrOffset?: number;
}

// ---- terminals (issue 9 §2) ----

/** A PTY inside the sandbox, kept by the agent like a background process (so it belongs to the machine). */
export interface TerminalRequest {
  /** Command; absent or empty: the user's login shell (from /etc/passwd, started as a login shell). */
  argv?: string[];
  cwd?: string;
  /** Merged over the sandbox environment (TERM belongs here). */
  env?: Record<string, string>;
  /** Window size in character cells, 1-1000 each. */
  cols: number;
  rows: number;
}

/** A terminal's record: that of a background process (execId is the terminal's id) and its window size. */
export interface TerminalInfo extends ProcessInfo {
  cols: number;
  rows: number;
}

/**
 * A file system event under a watched path. `overflow`: events were lost (the kernel's queue, or a reader
 * that fell too far behind); rescan what matters.
 */
export interface WatchEvent {
  type: 'create' | 'modify' | 'delete' | 'move_from' | 'move_to' | 'attrib' | 'overflow';
  /** Absolute path inside the sandbox ('' for overflow). */
  path: string;
  isDir: boolean;
}

export type FileType = 'file' | 'dir' | 'symlink' | 'other';
export interface FileEntry {
  name: string;
  type: FileType;
  /** Bytes. */
  size: number;
  /** Permission bits, e.g. 0o644. */
  mode: number;
  /** Milliseconds since the epoch. */
  mtimeMs: number;
}
export interface FileStat extends FileEntry {
  path: string;
}

export interface SandboxStats {
  /** CPU seconds used by the sandbox since it (this incarnation) started. */
  cpuSeconds: number;
  /** Resident host memory now, bytes. */
  memoryBytes: number;
  /** Highest resident host memory seen, bytes. */
  peakMemoryBytes: number;
}

export interface DriverCapabilities {
  /** Restoring one snapshot several times gives independent branches. */
  fork: boolean;
  /** Checkpoints include process memory, not only files. */
  liveMemory: boolean;
  /** checkpoint({leaveRunning:true}) keeps the sandbox running. */
  snapshotWhileRunning: boolean;
  /** Image variants create() can boot (core/desktop.ts); every backend has 'base'. */
  images: readonly ImageVariant[];
  /** What kind of boundary isolates the session: a user-space kernel or a hypervisor. */
  isolation: 'user-space-kernel' | 'hypervisor';
  /**
   * What exec can run: 'full' is a Debian userland (any program in the image); 'builtin' is a fixed set of
   * built-in commands (the in-memory test driver, see drivers/memory/shell.ts).
   */
  userland: 'full' | 'builtin';
  /** Bytes of each output stream (stdout, stderr) a background process keeps: the last ones. */
  processRingBytes: number;
  /** Background process records kept per sandbox (running and finished; the oldest finished go first). */
  maxProcesses: number;
  /**
   * Smallest memory limit a sandbox boots with, MiB. Session settings below it are refused (the engine's own
   * floor, LIMITS.memoryMb.min, applies too).
   */
  minMemoryMb: number;
  /**
   * The session's files live in the sandbox's memory (gVisor), so they are bounded by `limits.diskMb` inside
   * `limits.memoryMb`; false: they go to a virtual disk, the image's or grown to `limits.diskMb` (QEMU).
   */
  writesInMemory: boolean;
}

/** What a listener knows about a connection it accepted inside the sandbox. */
export interface TcpConnectionInfo {
  /** The sandbox port it was accepted on. */
  port: number;
  /** The connecting program's port (its address is always 127.0.0.1). */
  peerPort: number;
}

/** Called for each connection a sandbox listener accepts; the socket relays both ways until either side ends. */
export type TcpConnectionHandler = (socket: Duplex, info: TcpConnectionInfo) => void;

/** A listener on 127.0.0.1:port inside the sandbox (see SandboxDriver.listenTcp). */
export interface TcpListener {
  /** The port bound (the one asked for, or the one chosen for 0). */
  readonly port: number;
  /** Stops listening; connections already accepted go on. */
  close(opts?: CallOptions): Promise<void>;
}

export interface CallOptions {
  signal?: AbortSignal;
  /**
   * Run only if each of these absolute paths is canonical at that moment (its realpath is itself), checked
   * in the sandbox in the operation's own round trip; else nothing runs and the call rejects with
   * PathNotCanonicalError. The gate decides on a path as written and runs the call under this guard, so
   * resolving symlinks costs no round trip of its own. Honoured by exec, readFile, writeFile, listFiles
   * and stat; other operations ignore it.
   */
  guard?: readonly string[];
}

export interface CheckpointResult {
  /** Bytes written to the image directory. */
  bytes: number;
}

export interface SandboxDriver {
  readonly name: BackendName;
  readonly capabilities: DriverCapabilities;

  /** Checks that the backend is usable here; throws UnavailableError naming what is missing. */
  probe(opts?: CallOptions): Promise<void>;

  create(spec: SandboxSpec, opts?: CallOptions): Promise<void>;
  /**
   * Re-attaches to a sandbox that was running when the server stopped. Resolves true when it is alive and
   * answering, false when it is gone (the caller then restores or fails the session).
   */
  adopt(spec: SandboxSpec, opts?: CallOptions): Promise<boolean>;
  /** Driver-level ids of every sandbox this driver's state directory knows, live or not. */
  list(opts?: CallOptions): Promise<string[]>;

  exec(sandboxId: string, req: ExecRequest, opts?: CallOptions): Promise<ExecHandle>;

  /**
   * Starts a command that outlives every stream: stdin is /dev/null, stdout and stderr go to rings inside the
   * sandbox (so they are in every snapshot). req.stdin must not be true. Resolves once it is forked.
   */
  startProcess(sandboxId: string, execId: string, req: ExecRequest, opts?: CallOptions): Promise<{ pid: number }>;
  /** Background commands the sandbox holds, newest first. */
  listProcesses(sandboxId: string, opts?: CallOptions): Promise<ProcessInfo[]>;
  /**
   * What the rings hold from the given offsets, then (follow) live output; ends with an exit event once the
   * command has ended. Rejects NotFoundError for an unknown execId. Stopping the iteration never stops the
   * command.
   */
  processOutput(sandboxId: string, execId: string, opts?: ProcessOutputOptions): Promise<AsyncIterable<ProcessOutputEvent>>;
  /** Signals the command's process group with signalNumber (default 15, SIGTERM). Resolves false when it had already ended. */
  killProcess(sandboxId: string, execId: string, opts?: CallOptions & { signalNumber?: number }): Promise<boolean>;

  /**
   * Terminals: a PTY whose output goes to the stdout ring of a background-process record named termId, so
   * processOutput (replay + follow, ending with the exit) and killProcess take a termId too; listProcesses
   * leaves terminals out. Resolves once the command is forked.
   */
  openTerminal(sandboxId: string, termId: string, req: TerminalRequest, opts?: CallOptions): Promise<{ pid: number }>;
  /** Terminals the sandbox holds (running and ended), newest first. */
  listTerminals(sandboxId: string, opts?: CallOptions): Promise<TerminalInfo[]>;
  /** Bytes typed into the terminal. NotFoundError for an unknown termId; InvalidStateError once it has ended. */
  writeTerminal(sandboxId: string, termId: string, data: Uint8Array, opts?: CallOptions): Promise<void>;
  /** New window size (the foreground process group gets SIGWINCH). */
  resizeTerminal(sandboxId: string, termId: string, size: { cols: number; rows: number }, opts?: CallOptions): Promise<void>;

  readFile(sandboxId: string, path: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>>;
  /** Writes atomically: the file appears whole or not at all. Returns bytes written. */
  writeFile(
    sandboxId: string,
    path: string,
    data: AsyncIterable<Uint8Array>,
    opts?: CallOptions & { mode?: number },
  ): Promise<number>;
  listFiles(sandboxId: string, path: string, opts?: CallOptions): Promise<FileEntry[]>;
  stat(sandboxId: string, path: string, opts?: CallOptions): Promise<FileStat>;
  /** Canonical absolute path with symlinks followed, resolved inside the sandbox. Need not exist past its parent. */
  realpath(sandboxId: string, path: string, opts?: CallOptions): Promise<string>;
  mkdir(sandboxId: string, path: string, opts?: CallOptions & { parents?: boolean }): Promise<void>;
  remove(sandboxId: string, path: string, opts?: CallOptions & { recursive?: boolean }): Promise<void>;
  /**
   * Streams file system events under path (with recursive, the whole tree, new directories included) until
   * the iteration stops. Resolves once the watch is in place, so changes made after it are seen.
   */
  watchFiles(sandboxId: string, path: string, opts?: CallOptions & { recursive?: boolean }): Promise<AsyncIterable<WatchEvent>>;
  /** rename(2) inside the sandbox: atomic, same file system only; replaces a file at `to`. */
  rename(sandboxId: string, from: string, to: string, opts?: CallOptions): Promise<void>;

  /**
   * Opens a TCP connection to 127.0.0.1:port (then ::1) inside the sandbox; the Duplex relays bytes both
   * ways, with back-pressure, half-close (end()) and reset (destroy()). Rejects PortClosedError
   * (code port_closed) when nothing listens there; port must be 1-65535.
   */
  openTcp(sandboxId: string, port: number, opts?: CallOptions): Promise<Duplex>;
  /**
   * Listens on 127.0.0.1:port inside the sandbox (0: a free port, see TcpListener.port) and hands every
   * connection a program there makes to onConnection. The listener belongs to the machine: it survives
   * hibernate/wake and a server restart (connections may not). Handlers belong to the host and follow a
   * sandboxId: after a wake (a new sandboxId) or a server restart, listen again on the same port to attach
   * one (listening on a port the machine already holds is success and replaces the handler).
   */
  listenTcp(sandboxId: string, port: number, onConnection: TcpConnectionHandler, opts?: CallOptions): Promise<TcpListener>;

  pause(sandboxId: string, opts?: CallOptions): Promise<void>;
  resume(sandboxId: string, opts?: CallOptions): Promise<void>;

  /**
   * Writes the sandbox's full state (memory, processes, files) into imageDir. Without leaveRunning the
   * sandbox is gone afterwards and its RAM released.
   */
  checkpoint(
    sandboxId: string,
    imageDir: string,
    opts?: CallOptions & { leaveRunning?: boolean },
  ): Promise<CheckpointResult>;
  /** Starts spec.sandboxId from imageDir and applies spec.identity. One image may be restored many times. */
  restore(spec: SandboxSpec, imageDir: string, opts?: CallOptions): Promise<void>;
  /**
   * Whether imageDir holds a whole checkpoint of this driver's, one restore() accepts (recovery asks it of a
   * hibernation the server stopped in the middle of). False for a missing or partial image; never throws.
   */
  imageComplete(imageDir: string, opts?: CallOptions): Promise<boolean>;

  stats(sandboxId: string, opts?: CallOptions): Promise<SandboxStats>;
  /** Kills everything and deletes the sandbox's scratch state. Idempotent. */
  destroy(sandboxId: string, opts?: CallOptions): Promise<void>;

  /**
   * Registers a callback for sandboxes that die on their own (crash, OOM). `reason` starts with
   * `out_of_memory` when the kernel killed it at its memory limit; `last` is its final figures where the
   * backend could still read them (the engine keeps them in the session's metering).
   */
  onExit(listener: (sandboxId: string, reason: string, last?: SandboxStats) => void): void;
  /** Releases channels and watchers; sandboxes keep running (they are re-adopted on the next start). */
  close(): Promise<void>;
}
