/**
 * The half of a SandboxDriver that is the agent's: commands, background processes, terminals, files and
 * TCP, each one call over the sandbox's AgentChannel. gVisor and QEMU differ only in how they reach a
 * sandbox's channel (and whether the agent already holds the sandbox's environment), so they extend this
 * class and supply those two; argument checks and errors are the channel's, the same for both backends.
 */
import type { Duplex } from 'node:stream';
import type {
  CallOptions,
  ExecHandle,
  ExecRequest,
  FileEntry,
  FileStat,
  ProcessInfo,
  ProcessOutputEvent,
  ProcessOutputOptions,
  SandboxDriver,
  TcpConnectionHandler,
  TcpListener,
  TerminalInfo,
  TerminalRequest,
  WatchEvent,
} from '../../core/index.js';
import type { AgentChannel } from './channel.js';
import { TcpListenerRegistry } from './sockets.js';

/** The port methods this class implements. */
export type AgentMethod =
  | 'exec' | 'startProcess' | 'listProcesses' | 'processOutput' | 'killProcess'
  | 'openTerminal' | 'listTerminals' | 'writeTerminal' | 'resizeTerminal'
  | 'readFile' | 'writeFile' | 'listFiles' | 'stat' | 'realpath' | 'mkdir' | 'remove' | 'rename' | 'watchFiles'
  | 'openTcp' | 'listenTcp';

export abstract class AgentBackedDriver implements Pick<SandboxDriver, AgentMethod> {
  /** Host-side handlers of listenTcp; the driver passes `tcp.acceptorFor(id)` to AgentChannel.connect and `tcp.forget(id)` on destroy. */
  protected readonly tcp = new TcpListenerRegistry();

  /**
   * The channel to a sandbox's agent, ready for a caller's request. Rejects NotFoundError when the driver
   * has no such live sandbox, InvalidStateError when its agent cannot answer now (e.g. paused).
   */
  protected abstract agentChannel(sandboxId: string): Promise<AgentChannel>;

  /**
   * Environment merged under every command's, terminal's and background process's own `env`: the
   * sandbox's, where its agent does not already pass it on to what it starts. Default: none.
   */
  protected commandEnv(_sandboxId: string): Record<string, string> | undefined {
    return undefined;
  }

  private withEnv<R extends { env?: Record<string, string> }>(sandboxId: string, req: R): R {
    const base = this.commandEnv(sandboxId);
    return base ? { ...req, env: { ...base, ...req.env } } : req;
  }

  // ---- commands and background processes ----

  async exec(sandboxId: string, req: ExecRequest, opts: CallOptions = {}): Promise<ExecHandle> {
    return this.guarded(sandboxId, opts, (ch) => ch.exec(this.withEnv(sandboxId, req), opts));
  }
  async startProcess(sandboxId: string, execId: string, req: ExecRequest, opts: CallOptions = {}): Promise<{ pid: number }> {
    return (await this.agentChannel(sandboxId)).startProcess(execId, this.withEnv(sandboxId, req), opts);
  }
  async listProcesses(sandboxId: string, opts: CallOptions = {}): Promise<ProcessInfo[]> {
    return (await this.agentChannel(sandboxId)).listProcesses(opts);
  }
  async processOutput(sandboxId: string, execId: string, opts: ProcessOutputOptions = {}): Promise<AsyncIterable<ProcessOutputEvent>> {
    return (await this.agentChannel(sandboxId)).processOutput(execId, opts);
  }
  async killProcess(sandboxId: string, execId: string, opts: CallOptions & { signalNumber?: number } = {}): Promise<boolean> {
    return (await this.agentChannel(sandboxId)).killProcess(execId, opts);
  }

  // ---- terminals ----

  async openTerminal(sandboxId: string, termId: string, req: TerminalRequest, opts: CallOptions = {}): Promise<{ pid: number }> {
    return (await this.agentChannel(sandboxId)).terminals.open(termId, this.withEnv(sandboxId, req), opts);
  }
  async listTerminals(sandboxId: string, opts: CallOptions = {}): Promise<TerminalInfo[]> {
    return (await this.agentChannel(sandboxId)).terminals.list(opts);
  }
  async writeTerminal(sandboxId: string, termId: string, data: Uint8Array, opts: CallOptions = {}): Promise<void> {
    return (await this.agentChannel(sandboxId)).terminals.write(termId, data, opts);
  }
  async resizeTerminal(sandboxId: string, termId: string, size: { cols: number; rows: number }, opts: CallOptions = {}): Promise<void> {
    return (await this.agentChannel(sandboxId)).terminals.resize(termId, size, opts);
  }

  // ---- files ----

  /** Resolves once the agent has opened the file, so a missing one rejects here, not at the first chunk. */
  async readFile(sandboxId: string, path: string, opts: CallOptions = {}): Promise<AsyncIterable<Uint8Array>> {
    return this.guarded(sandboxId, opts, (ch) => ch.readFile(path, opts));
  }
  async writeFile(sandboxId: string, path: string, data: AsyncIterable<Uint8Array>, opts: CallOptions & { mode?: number } = {}): Promise<number> {
    return this.guarded(sandboxId, opts, (ch) => ch.writeFile(path, data, opts));
  }
  async listFiles(sandboxId: string, path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    return this.guarded(sandboxId, opts, (ch) => ch.list(path, opts));
  }
  async stat(sandboxId: string, path: string, opts: CallOptions = {}): Promise<FileStat> {
    return this.guarded(sandboxId, opts, (ch) => ch.stat(path, opts));
  }
  /** An operation on the sandbox's channel, run under opts.guard when there is one (CallOptions.guard). */
  private async guarded<T>(sandboxId: string, opts: CallOptions, op: (ch: AgentChannel) => Promise<T>): Promise<T> {
    const ch = await this.agentChannel(sandboxId);
    return opts.guard?.length ? ch.guarded(opts.guard, () => op(ch), opts.signal) : op(ch);
  }
  async realpath(sandboxId: string, path: string, opts: CallOptions = {}): Promise<string> {
    return (await this.agentChannel(sandboxId)).realpath(path, opts);
  }
  async mkdir(sandboxId: string, path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    return (await this.agentChannel(sandboxId)).mkdir(path, opts);
  }
  async remove(sandboxId: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    return (await this.agentChannel(sandboxId)).remove(path, opts);
  }
  async rename(sandboxId: string, from: string, to: string, opts: CallOptions = {}): Promise<void> {
    return (await this.agentChannel(sandboxId)).rename(from, to, opts);
  }
  async watchFiles(sandboxId: string, path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<AsyncIterable<WatchEvent>> {
    return (await this.agentChannel(sandboxId)).watch(path, opts);
  }

  // ---- TCP ----

  async openTcp(sandboxId: string, port: number, opts: CallOptions = {}): Promise<Duplex> {
    return (await this.agentChannel(sandboxId)).sockets.openTcp(port, opts);
  }
  /** The channel is looked up at listen and again when the listener closes (it may have been reconnected since). */
  async listenTcp(sandboxId: string, port: number, onConnection: TcpConnectionHandler, opts: CallOptions = {}): Promise<TcpListener> {
    return this.tcp.listen(sandboxId, async () => (await this.agentChannel(sandboxId)).sockets, port, onConnection, opts);
  }
}
