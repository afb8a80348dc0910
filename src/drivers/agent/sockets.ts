/**
 * The host side of TCP streams through the agent (PROTOCOL.md, "Sockets"): one connection to a loopback
 * port inside the sandbox is one `AgentSocket`, a Node Duplex whose bytes travel as `E <id> d` / `c <id> d`
 * lines. Flow control both ways: the agent sends data lines against credit (`E <id> g <n>` grants more as
 * the consumer reads), and we keep at most SOCKET_WINDOW bytes sent but not yet taken by the sandbox socket
 * (acknowledged by `c <id> a <n>`). Half-close is `end()` (→ `E <id> eof`) and the readable's end (← `c <id>
 * eof`); destroy() resets the connection (`E <id> rst`).
 */
import { Duplex } from 'node:stream';
import { AppError, InvalidArgumentError, NotFoundError, PortClosedError, SandboxError, throwIfAborted } from '../../core/errors.js';
import type { CallOptions, TcpConnectionHandler, TcpConnectionInfo, TcpListener } from '../../core/sandbox.js';
import { CHUNK, GRANT_BATCH, ReplyRoute, V, dec, deferred, failure, num, raceAbort, type Link, type Route } from './wire.js';

/** Bytes we send to one socket before the agent acknowledges them (`c <id> a <n>`). */
export const SOCKET_WINDOW = 1 << 20;
/** Stream ids from here up are the agent's (accepted connections); ours stay below it. */
export const AGENT_ID_BASE = 2 ** 52;
export const V_c = 0x63;
export const V_n = 0x6e;

const ERRNO_ECONNREFUSED = '111';
const ERRNO_EADDRINUSE = '98';

export function checkPort(port: number, { allowZero = false } = {}): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535) {
    throw new InvalidArgumentError(`port must be an integer from ${allowZero ? 0 : 1} to 65535`, { details: { port } });
  }
}

/** Maps a socket failure line (`r <id> <errno> <message>`) to an error naming the port. */
export function socketFailure(fields: string[], port: number, op: 'connect' | 'listen' | 'stream'): AppError {
  if (fields[0] === ERRNO_ECONNREFUSED && op === 'connect') return new PortClosedError(port);
  if (fields[0] === ERRNO_EADDRINUSE && op === 'listen') {
    return new AppError('conflict', `port ${port} is already in use inside the sandbox`, { details: { port, errno: 'EADDRINUSE' } });
  }
  const e = failure(fields);
  return new SandboxError(`port ${port}: ${e.message}`, { details: { ...e.details, port }, cause: e });
}

/** One TCP connection inside the sandbox, relayed over the agent channel. */
export class AgentSocket extends Duplex implements Route {
  /** Resolves when the connection is established (at once for an accepted one). */
  readonly opened = deferred<void>();
  /** Bytes the sandbox socket received from us / sent to us. */
  bytesOut = 0;
  bytesIn = 0;
  private owed = 0; // data lines received whose credit we have not granted back
  private unacked = 0;
  private ackWaiter: (() => void) | null = null;
  private agentDone = false; // the agent has ended the stream (r line): nothing more to send it

  constructor(private readonly o: { id: number; port: number; link: Link; accepted?: boolean }) {
    super({ allowHalfOpen: true, readableHighWaterMark: 256 * 1024, writableHighWaterMark: 256 * 1024 });
    if (o.accepted) this.opened.resolve();
  }

  get port(): number {
    return this.o.port;
  }

  // ---- lines from the agent ----

  onLine(verb: number, rest: Buffer): void {
    if (this.agentDone) return;
    const f = rest.toString('latin1').split(' ');
    if (verb === V_c) {
      switch (f[0]) {
        case 'd': {
          const data = dec(f[1]);
          this.bytesIn += data.length;
          this.owed++;
          if (this.push(data) && this.owed >= GRANT_BATCH) this.grant();
          return;
        }
        case 'a':
          this.unacked -= num(f[1]);
          this.ackWaiter?.();
          return;
        case 'eof':
          this.push(null);
          return;
        case 'open':
          this.opened.resolve();
          return;
        default:
          throw new SandboxError(`unknown socket line from the agent: ${f[0]}`);
      }
    }
    if (verb === V.r) {
      this.agentDone = true;
      this.o.link.release(this.o.id);
      if (f[0] === '0') {
        this.push(null); // a no-op when the eof came first
        return;
      }
      const opened = this.opened.settled;
      const err = socketFailure(f, this.o.port, opened ? 'stream' : 'connect');
      this.opened.reject(err);
      this.fail(opened ? err : undefined); // before open the error is the opener's, not an 'error' event
    }
  }

  onFail(err: AppError): void {
    this.agentDone = true;
    const opened = this.opened.settled;
    this.opened.reject(err);
    this.fail(opened ? err : undefined);
  }

  /** Ends the stream with err as its 'error' event when someone listens for one (a handler that does not
   * would otherwise turn a dropped connection into an uncaught exception). */
  private fail(err: Error | undefined): void {
    this.destroy(err && this.listenerCount('error') > 0 ? err : undefined);
  }

  private grant(): void {
    if (!this.owed || this.agentDone) return;
    this.send(`E ${this.o.id} g ${this.owed}\n`);
    this.owed = 0;
  }

  private send(line: string): void {
    try {
      this.o.link.send(line);
    } catch {
      // the channel is gone; onFail ends this stream
    }
  }

  // ---- Duplex ----

  override _read(): void {
    this.grant(); // the consumer wants more: give back the credit of what it has taken
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.writeChunks(chunk).then(() => cb(), (e: unknown) => cb(e as Error));
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (e?: Error | null) => void): void {
    this.writeChunks(Buffer.concat(chunks.map((c) => c.chunk))).then(() => cb(), (e: unknown) => cb(e as Error));
  }

  private async writeChunks(buf: Buffer): Promise<void> {
    await this.opened.promise;
    for (let off = 0; off < buf.length; off += CHUNK) {
      while (this.unacked >= SOCKET_WINDOW && !this.agentDone) await new Promise<void>((r) => (this.ackWaiter = r));
      this.ackWaiter = null;
      if (this.agentDone) throw new SandboxError(`port ${this.o.port}: the connection is closed`);
      const piece = buf.subarray(off, off + CHUNK);
      this.unacked += piece.length;
      this.bytesOut += piece.length;
      await this.o.link.sendFlow(`E ${this.o.id} d ${piece.toString('base64')}\n`);
    }
  }

  override _final(cb: (e?: Error | null) => void): void {
    this.opened.promise.then(
      () => {
        if (!this.agentDone) this.send(`E ${this.o.id} eof\n`);
        cb();
      },
      (e: unknown) => cb(e as Error),
    );
  }

  override _destroy(err: Error | null, cb: (e?: Error | null) => void): void {
    if (!this.agentDone) {
      this.agentDone = true;
      this.o.link.release(this.o.id);
      this.send(`E ${this.o.id} rst\n`);
    }
    this.ackWaiter?.();
    cb(err);
  }
}

/** A listener's answer lines: `c <id> listener <port>` (for `listeners`), then `r`. */
export function parseListenerLine(f: string[]): number | undefined {
  return f[0] === 'listener' ? num(f[1]) : undefined;
}

/** What ChannelSockets borrows from its AgentChannel. */
export interface SocketHost {
  link: Link;
  newId(): number;
  addRoute(id: number, r: Route): void;
  hasRoute(id: number): boolean;
  call<T>(line: (id: number) => string, route: ReplyRoute<T>, signal?: AbortSignal): Promise<T>;
  assertOpen(): void;
  /** The driver's handler for a port this channel did not listen() on itself (see AgentChannelConnectOptions). */
  acceptTcp(port: number): TcpConnectionHandler | undefined;
}

/** The socket half of an AgentChannel: connect, listen, and the connections listeners announce (`n`). */
export class ChannelSockets {
  /** Handlers of the sandbox listeners this host has claimed, by port. */
  private readonly acceptors = new Map<number, TcpConnectionHandler>();

  constructor(private readonly h: SocketHost) {}


  /**
   * Connects to 127.0.0.1:port (then ::1) inside the sandbox; resolves once connected. Rejects
   * PortClosedError when nothing listens there. Aborting before it is connected resets the attempt.
   */
  async openTcp(port: number, opts: CallOptions = {}): Promise<AgentSocket> {
    checkPort(port);
    this.h.assertOpen();
    throwIfAborted(opts.signal);
    const id = this.h.newId();
    const sock = new AgentSocket({ id, port, link: this.h.link });
    this.h.addRoute(id, sock);
    this.h.link.send(`E ${id} connect ${port}\n`);
    try {
      await raceAbort(sock.opened.promise, opts.signal);
    } catch (e) {
      sock.destroy();
      throw e;
    }
    return sock;
  }

  /**
   * Listens on 127.0.0.1:port inside the sandbox (0: a free port) and hands each accepted connection to
   * onConnection; resolves with the port bound. The listener is the machine's: it outlives this channel.
   * Listening again on a port replaces the handler (that is how a new host re-claims a listener).
   */
  async listen(port: number, onConnection: TcpConnectionHandler, opts: CallOptions = {}): Promise<number> {
    checkPort(port, { allowZero: true });
    if (typeof onConnection !== 'function') throw new InvalidArgumentError('onConnection must be a function');
    const route = new SocketReplyRoute<number>(port, 'listen', (verb, f) => (verb === V.r ? num(f[1]) : undefined));
    const bound = await this.h.call((id) => `E ${id} listen ${port}\n`, route, opts.signal);
    this.acceptors.set(bound, onConnection);
    return bound;
  }

  /** Stops listening on port (connections already accepted go on). Not found when nothing of ours listens. */
  async unlisten(port: number, opts: CallOptions = {}): Promise<void> {
    checkPort(port);
    this.acceptors.delete(port);
    const route = new SocketReplyRoute<true>(port, 'unlisten', (verb) => (verb === V.r ? true : undefined));
    await this.h.call((id) => `E ${id} unlisten ${port}\n`, route, opts.signal);
  }

  /** Ports the agent listens on (whoever asked for them), ascending. */
  async listeners(opts: CallOptions = {}): Promise<number[]> {
    const ports: number[] = [];
    const route = new SocketReplyRoute<number[]>(0, 'listeners', (verb, f) => {
      if (verb === V_c) {
        const p = parseListenerLine(f);
        if (p !== undefined) ports.push(p);
        return undefined;
      }
      return verb === V.r ? ports.sort((a, b) => a - b) : undefined;
    });
    return this.h.call((id) => `E ${id} listeners\n`, route, opts.signal);
  }

  /** `n <id> <port> <peerPort>`: a listener accepted a connection; nobody to take it means a reset. */
  onAccepted(line: Buffer): void {
    const f = line.subarray(2).toString('latin1').split(' ');
    let id: number, port: number, peerPort: number;
    try {
      [id, port, peerPort] = [num(f[0]), num(f[1]), num(f[2])];
    } catch {
      return; // malformed: noise
    }
    if (id < AGENT_ID_BASE || this.h.hasRoute(id)) return;
    const handler = this.acceptors.get(port) ?? this.h.acceptTcp(port);
    if (!handler) {
      this.h.link.send(`E ${id} rst\n`);
      return;
    }
    const sock = new AgentSocket({ id, port, link: this.h.link, accepted: true });
    this.h.addRoute(id, sock);
    try {
      handler(sock, { port, peerPort });
    } catch {
      sock.destroy();
    }
  }
}

/** A socket request answered by one final line; failures name the port (EADDRINUSE, ENOENT). */
class SocketReplyRoute<T> extends ReplyRoute<T> {
  constructor(
    private readonly port: number,
    private readonly op: 'listen' | 'unlisten' | 'listeners',
    accept: (verb: number, fields: string[]) => T | undefined,
  ) {
    super(undefined, accept);
  }
  override onLine(verb: number, rest: Buffer): void {
    const f = rest.toString('latin1').split(' ');
    if (verb !== V.r || f[0] === '0') return super.onLine(verb, rest);
    this.d.reject(this.op === 'unlisten' && f[0] === '2' ? new NotFoundError('listener', String(this.port)) : socketFailure(f, this.port, 'listen'));
  }
}


/** What the registry needs of a channel (structural, so this file does not import channel.ts). */
export interface ListeningChannel {
  listen(port: number, onConnection: TcpConnectionHandler, opts?: CallOptions): Promise<number>;
  unlisten(port: number, opts?: CallOptions): Promise<void>;
}

/**
 * The listeners a driver has asked for, per sandbox. The agent keeps a listener across hibernate/wake and a
 * host reset; a driver passes `acceptorFor(sandboxId)` to every channel it opens to that machine, so the
 * connections accepted after a wake reach the same handler.
 */
export class TcpListenerRegistry {
  private readonly bySandbox = new Map<string, Map<number, TcpConnectionHandler>>();

  acceptorFor(sandboxId: string): (port: number) => TcpConnectionHandler | undefined {
    return (port) => this.bySandbox.get(sandboxId)?.get(port);
  }

  async listen(
    sandboxId: string,
    channel: () => Promise<ListeningChannel>,
    port: number,
    onConnection: TcpConnectionHandler,
    opts: CallOptions = {},
  ): Promise<TcpListener> {
    const bound = await (await channel()).listen(port, onConnection, opts);
    let m = this.bySandbox.get(sandboxId);
    if (!m) this.bySandbox.set(sandboxId, (m = new Map()));
    m.set(bound, onConnection);
    return {
      port: bound,
      close: async (o: CallOptions = {}) => {
        if (this.bySandbox.get(sandboxId)?.get(bound) !== onConnection) return; // replaced or closed already
        this.bySandbox.get(sandboxId)?.delete(bound);
        await (await channel()).unlisten(bound, o);
      },
    };
  }

  /** The sandbox is gone: its handlers with it. */
  forget(sandboxId: string): void {
    this.bySandbox.delete(sandboxId);
  }
}

export type { TcpConnectionInfo };
