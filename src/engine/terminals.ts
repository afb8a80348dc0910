/**
 * Terminals of a session (issue 9 §2). The PTY and its output ring live inside the sandbox (the agent keeps a
 * terminal like a background process), so a terminal survives hibernate, wake and a server restart. The
 * engine keeps, per terminal somebody is attached to, a hub: one follower of the ring feeding a headless
 * terminal model (@xterm/headless), the asciicast recording, and the attached clients. A late joiner gets
 * the model's screen first, then live output, with nothing lost or repeated between the two.
 *
 * Input holder: each hub has at most one `controller` (a client id); only it may type or resize. Others
 * watch; their input is refused with `not_controller`. The controller is a server-side fact: the first
 * client asking for control while nobody holds it gets it, and setController() moves it. These are operator
 * calls (agent tokens are refused, as for exec): agents reach a machine only through gated tools.
 *
 * The session's control lease (gate-control.ts) outranks that: while one is held, only a client of the
 * holder (the same principal through the same console session, holderName) may hold input; anyone else's
 * input or request for it is refused (forbidden, reason control_lease_held, naming the holder). When a
 * lease starts, a controller who is not its holder loses input; every client gets a `role` frame naming the
 * holder, and another (holder null) when it ends. The recording gets a marker at both, so the typed input
 * between them is the holder's.
 *
 * When the follower fails (the sandbox was hibernated, the channel lost), the hub closes its clients with
 * reason `detached` and goes; the next attach builds a new one from the ring (the screen comes back).
 */
import xtermHeadless from '@xterm/headless';
import serializeAddon from '@xterm/addon-serialize';
import {
  AppError,
  InvalidArgumentError,
  NotFoundError,
  isId,
  newId,
  type CallOptions,
  type ExecExit,
  type Principal,
  type SandboxDriver,
  type TerminalInfo,
} from '../core/index.js';
import { randomBytes } from 'node:crypto';
import { holderName, leaseStanding } from './gate-control.js';
import { forbiddenForWatcher } from './gate-context.js';
import type { ProcessSteps } from './processes.js';
import { TerminalRecorder } from './terminal-record.js';
import type { TicketStore } from './tickets.js';

const { Terminal } = xtermHeadless;
const { SerializeAddon } = serializeAddon;
type HeadlessTerminal = InstanceType<typeof Terminal>;

/** Lines of scrollback the host model keeps (what a late joiner gets above the screen). */
export const TERMINAL_SCROLLBACK = 1000;

export interface TerminalOpenRequest {
  cols: number;
  rows: number;
  cwd?: string;
  env?: Record<string, string>;
  /** Command; absent or empty: the user's login shell. */
  argv?: string[];
}

/** What a client receives. `screen` comes once, first: the bytes that redraw the current screen. */
export interface TerminalSink {
  data(bytes: Uint8Array): void;
  /** Control: role changes, resizes by the controller, errors for this client. */
  control(msg: TerminalControl): void;
  /** The terminal ended (exit) or the client was let go (detached, killed); nothing follows. */
  closed(reason: { exit?: ExecExit; reason: 'exit' | 'detached' | 'closed' }): void;
}

export type TerminalControl =
  | { type: 'hello'; termId: string; clientId: string; role: 'controller' | 'watcher'; cols: number; rows: number; leaseHolder: string | null }
  | { type: 'role'; role: 'controller' | 'watcher'; leaseHolder: string | null }
  | { type: 'resize'; cols: number; rows: number }
  | { type: 'exit'; code: number; signal: number | null }
  | { type: 'error'; error: { code: string; message: string } };

export interface TerminalClient {
  readonly id: string;
  readonly role: 'controller' | 'watcher';
  /** Typed bytes; rejects `not_controller` for a watcher. */
  write(data: Uint8Array): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  /**
   * Asks for control; true when granted (nobody held it), false when another client holds it. Throws
   * forbidden (control_lease_held) while someone else holds the session's control lease.
   */
  takeControl(): Promise<boolean>;
  detach(): void;
}

export interface TerminalView extends TerminalInfo {
  /** Client id holding input, or null. */
  controller: string | null;
  /** Clients attached through this server. */
  clients: number;
}

export interface TerminalService {
  open(p: Principal, sessionId: string, req: TerminalOpenRequest, opts?: CallOptions): Promise<TerminalView>;
  list(p: Principal, sessionId: string, opts?: CallOptions): Promise<TerminalView[]>;
  get(p: Principal, sessionId: string, termId: string, opts?: CallOptions): Promise<TerminalView>;
  /** Attaches a client: it gets the screen, then live output. want 'control' takes input when free. */
  attach(p: Principal, sessionId: string, termId: string, sink: TerminalSink, opts?: CallOptions & { want?: 'control' | 'watch'; via?: string | null }): Promise<TerminalClient>;
  kill(p: Principal, sessionId: string, termId: string, opts?: CallOptions & { signalNumber?: number }): Promise<{ signalled: boolean }>;
  /** Moves input to clientId (null: nobody); refused for a client who is not the lease holder while a lease is held. */
  setController(p: Principal, sessionId: string, termId: string, clientId: string | null): Promise<void>;
  /**
   * A single-use ticket standing for p (through `via`, a console session's handle) on this terminal, for a
   * browser WebSocket (which cannot send headers).
   */
  ticket(p: Principal, sessionId: string, termId: string, opts?: CallOptions & { via?: string | null }): Promise<{ ticket: string; expiresAt: number }>;
  /** Redeems a ticket (once); null when unknown, used or expired. */
  redeem(ticket: string, sessionId: string, termId: string): { principal: Principal; via: string | null } | null;
  /** A watch link was revoked: the session's watch-only viewers are let go (reason closed). */
  closeWatchers(sessionId: string): void;
  /** The session's control lease started (its holder) or ended (null): the engine wires this to ControlLeases. */
  leaseChanged(sessionId: string, holder: string | null): void;
  /** The asciicast v2 recording. */
  recording(p: Principal, sessionId: string, termId: string, opts?: CallOptions): Promise<string>;
  /** The session went: drop its hubs and recordings. */
  forget(sessionId: string): Promise<void>;
  close(): Promise<void>;
}

export interface TerminalSteps extends ProcessSteps {
  /** Where recordings go (`<dataDir>/terminals`). */
  recordDir: string;
  now(): number;
  /** Authorizes p on the session (operator, tenant) without waking it. */
  check(p: Principal, sessionId: string): Promise<void>;
  /** The holder of the session's live control lease (holderName), or null; ends a lapsed one. */
  leaseHolder(sessionId: string): Promise<string | null>;
  /** The live sandbox for a watch-only link's viewer of its own session (not found for any other). */
  watchLive: ProcessSteps['live'];
  /** Browser WebSocket tickets (engine/tickets.ts), shared with desktops. */
  tickets: TicketStore;
}

/** Input or a resize from a client that only watches: refused server-side (code forbidden, reason not_controller). */
export class NotControllerError extends AppError {
  constructor(termId: string, controller: string | null, what: string) {
    super('forbidden', `not_controller: this client watches terminal ${termId} and may not ${what} it; ${controller ? `client ${controller}` : 'nobody'} holds input`, {
      details: { reason: 'not_controller', termId, controller },
    });
  }
}

/** Input, a resize or a request for input while someone else holds the session's control lease. */
export class LeaseHeldError extends AppError {
  constructor(sessionId: string, termId: string, holder: string, what: string) {
    super('forbidden', `control_lease_held: ${holder} holds control of session ${sessionId}; only they may ${what} terminal ${termId}`, {
      details: { reason: 'control_lease_held', holder, sessionId, termId },
    });
  }
}

/** Unknown or malformed ids are not found, as for any id a caller cannot see. */
function checkTermId(termId: string): string {
  if (typeof termId !== 'string' || !isId('terminal', termId)) throw new NotFoundError('terminal', String(termId));
  return termId;
}

function checkSize(cols: unknown, rows: unknown): void {
  for (const [k, v] of [['cols', cols], ['rows', rows]] as const) {
    if (!Number.isInteger(v) || (v as number) < 1 || (v as number) > 1000) throw new InvalidArgumentError(`${k}: must be an integer from 1 to 1000`, { details: { field: k } });
  }
}

interface ClientState {
  id: string;
  /** Who this client is as a lease holder would be named (holderName of its principal and console session). */
  holder: string;
  /** A watch-only link's viewer: never holds input, whatever the lease. */
  watchOnly: boolean;
  sink: TerminalSink;
  /** Live chunks held back until its screen is sent. */
  pending: Uint8Array[] | null;
}

class Hub {
  readonly model: HeadlessTerminal;
  private readonly serializer = new SerializeAddon();
  readonly clients = new Map<string, ClientState>();
  controller: string | null = null;
  /** Holder of the session's control lease as this hub last heard (leaseChanged, or checked on input). */
  lease: string | null = null;
  offset = 0;
  exit: ExecExit | null = null;
  private readonly ctl = new AbortController();
  gone = false;

  constructor(
    readonly key: string,
    readonly sessionId: string,
    readonly termId: string,
    public info: TerminalInfo,
    private readonly d: SandboxDriver,
    private readonly sandboxId: string,
    readonly rec: TerminalRecorder,
    private readonly now: () => number,
    private readonly onGone: (h: Hub) => void,
  ) {
    this.model = new Terminal({ cols: info.cols, rows: info.rows, scrollback: TERMINAL_SCROLLBACK, allowProposedApi: true });
    this.model.loadAddon(this.serializer);
  }

  /** Follows the ring from its start: the model and recording catch up, then stay live. */
  async run(): Promise<void> {
    try {
      const src = await this.d.processOutput(this.sandboxId, this.termId, { follow: true, stdoutOffset: this.offset, signal: this.ctl.signal });
      for await (const ev of src) {
        if (ev.type === 'exit') {
          this.exit = ev.exit;
          break;
        }
        if (ev.type !== 'stdout') continue;
        this.offset = ev.offset + ev.data.byteLength;
        this.model.write(ev.data);
        this.rec.output(ev.offset, ev.data, this.now());
        for (const c of this.clients.values()) {
          if (c.pending) c.pending.push(ev.data);
          else c.sink.data(ev.data);
        }
      }
    } catch {
      // the sandbox went away (hibernated, stopped) or the hub was closed: clients reattach
    }
    if (this.exit) {
      const x = this.exit;
      await new Promise<void>((r) => this.model.write('', r));
      for (const c of [...this.clients.values()]) this.flushTo(c, () => {
        c.sink.control({ type: 'exit', code: x.code, signal: x.signal });
        c.sink.closed({ exit: x, reason: 'exit' });
      });
      this.clients.clear();
      this.controller = null;
      this.info = { ...this.info, state: 'exited', exit: x };
      await this.rec.flush();
      return; // an ended terminal's hub stays: its screen is final
    }
    this.close('detached');
  }

  private flushTo(c: ClientState, then: () => void): void {
    if (c.pending) {
      for (const d of c.pending) c.sink.data(d);
      c.pending = null;
    }
    then();
  }

  join(sink: TerminalSink, want: 'control' | 'watch', holder: string, watchOnly: boolean): ClientState {
    const c: ClientState = { id: `cli_${randomBytes(8).toString('hex')}`, holder, watchOnly, sink, pending: [] };
    const standing = leaseStanding(c, this.lease);
    if (want === 'control' && (standing === 'free' || standing === 'holder') && this.controller === null && !this.exit) this.controller = c.id;
    this.clients.set(c.id, c);
    sink.control({ type: 'hello', termId: this.termId, clientId: c.id, role: this.controller === c.id ? 'controller' : 'watcher', cols: this.model.cols, rows: this.model.rows, leaseHolder: this.lease });
    // Everything written to the model before this empty write is in the screen; chunks after it wait in
    // pending, so the two together are the stream with nothing lost or repeated.
    this.model.write('', () => {
      const screen = this.serializer.serialize({ scrollback: TERMINAL_SCROLLBACK });
      if (screen) sink.data(new TextEncoder().encode(screen));
      this.flushTo(c, () => {
        if (this.exit) {
          sink.control({ type: 'exit', code: this.exit.code, signal: this.exit.signal });
          sink.closed({ exit: this.exit, reason: 'exit' });
          this.clients.delete(c.id);
        }
      });
    });
    return c;
  }

  leave(id: string): void {
    this.clients.delete(id);
    if (this.controller === id) this.controller = null;
  }

  setController(id: string | null): void {
    const c = id === null ? null : this.clients.get(id);
    if (id !== null && !c) throw new NotFoundError('terminal client', id);
    if (c) this.leaseCheck(c, 'hold input on');
    const before = this.controller;
    this.controller = id;
    if (before && before !== id) this.clients.get(before)?.sink.control({ type: 'role', role: 'watcher', leaseHolder: this.lease });
    if (id && before !== id) this.clients.get(id)?.sink.control({ type: 'role', role: 'controller', leaseHolder: this.lease });
  }

  /** The lease started (holder) or ended (null): a controller who is not the holder watches; everyone is told. */
  setLease(holder: string | null): void {
    if (holder === this.lease) return;
    this.lease = holder;
    this.rec.marker(holder ? `control lease: ${holder} holds input` : 'control lease ended', this.now());
    const ctl = this.controller === null ? undefined : this.clients.get(this.controller);
    if (ctl && leaseStanding(ctl, holder) === 'excluded') this.controller = null;
    for (const c of this.clients.values()) c.sink.control({ type: 'role', role: this.controller === c.id ? 'controller' : 'watcher', leaseHolder: holder });
  }

  /** Refuses `what` for a client the lease leaves out: a watcher, or anyone but the holder while a lease is held. */
  leaseCheck(c: ClientState, what: string): void {
    const standing = leaseStanding(c, this.lease);
    if (standing === 'watcher') throw forbiddenForWatcher();
    if (standing === 'excluded') throw new LeaseHeldError(this.sessionId, this.termId, this.lease as string, what);
  }

  /** Refuses `what` for a client the lease leaves out, then one who is not the controller. */
  private mayInput(c: ClientState, what: string): void {
    this.leaseCheck(c, what);
    if (this.controller !== c.id) throw new NotControllerError(this.termId, this.controller, what);
  }

  async input(c: ClientState, data: Uint8Array, opts: CallOptions): Promise<void> {
    this.mayInput(c, 'type into');
    await this.d.writeTerminal(this.sandboxId, this.termId, data, opts);
    this.rec.input(data, this.now());
  }

  async resize(c: ClientState, cols: number, rows: number, opts: CallOptions): Promise<void> {
    this.mayInput(c, 'resize');
    checkSize(cols, rows);
    await this.d.resizeTerminal(this.sandboxId, this.termId, { cols, rows }, opts);
    this.model.resize(cols, rows);
    this.info = { ...this.info, cols, rows };
    this.rec.resize(cols, rows, this.now());
    for (const o of this.clients.values()) if (o.id !== c.id) o.sink.control({ type: 'resize', cols, rows });
  }

  /** Lets the watch-only viewers go. */
  dropWatchers(): void {
    for (const c of [...this.clients.values()]) {
      if (!c.watchOnly) continue;
      this.clients.delete(c.id);
      c.sink.closed({ reason: 'closed' });
    }
  }

  close(reason: 'detached' | 'closed'): void {
    if (this.gone) return;
    this.gone = true;
    this.ctl.abort();
    for (const c of this.clients.values()) c.sink.closed({ reason });
    this.clients.clear();
    void this.rec.flush();
    this.model.dispose();
    this.onGone(this);
  }
}

export function terminalService(m: TerminalSteps): TerminalService {
  const hubs = new Map<string, Hub>();
  const opening = new Map<string, Promise<Hub>>();
  const { tickets } = m;
  /** Asks the gate for the lease (ending a lapsed one, which reaches the hubs through leaseChanged). */
  const syncLease = async (hub: Hub) => hub.setLease(await m.leaseHolder(hub.sessionId));

  const view = (info: TerminalInfo, hub?: Hub): TerminalView => ({ ...info, controller: hub?.controller ?? null, clients: hub?.clients.size ?? 0 });

  /** The live sandbox for p: an operator's, or (watch-only links) a watcher's of its own session. */
  const live = (p: Principal, sessionId: string, opts: CallOptions) => (p.kind === 'watcher' ? m.watchLive(p, sessionId, opts) : m.live(p, sessionId, opts));

  async function hubFor(p: Principal, sessionId: string, termId: string, opts: CallOptions): Promise<Hub> {
    const key = `${sessionId}/${termId}`;
    const have = hubs.get(key);
    if (have && !have.gone) {
      await live(p, sessionId, opts); // authorizes, and wakes a hibernated session
      if (!have.gone) return have;
    }
    let p2 = opening.get(key);
    if (!p2) {
      p2 = (async () => {
        const { d, sandboxId } = await live(p, sessionId, opts);
        const info = (await d.listTerminals(sandboxId, opts)).find((t) => t.execId === termId);
        if (!info) throw new NotFoundError('terminal', termId);
        const rec = await TerminalRecorder.open({ dir: m.recordDir, sessionId, termId, cols: info.cols, rows: info.rows, startedAt: info.startedAt });
        const hub = new Hub(key, sessionId, termId, info, d, sandboxId, rec, m.now, (h) => {
          if (hubs.get(h.key) === h) hubs.delete(h.key);
        });
        hub.lease = await m.leaseHolder(sessionId);
        hubs.set(key, hub);
        void hub.run();
        return hub;
      })().finally(() => opening.delete(key));
      opening.set(key, p2);
    }
    return p2;
  }

  return {
    async open(p, sessionId, req, opts = {}) {
      checkSize(req.cols, req.rows);
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      const termId = newId('terminal');
      const env = { TERM: 'xterm-256color', ...req.env };
      const argv = req.argv?.length ? req.argv : undefined;
      const { pid } = await d.openTerminal(sandboxId, termId, { cols: req.cols, rows: req.rows, env, ...(req.cwd ? { cwd: req.cwd } : {}), ...(argv ? { argv } : {}) }, opts);
      m.meter(sessionId, { execCount: 1 });
      await m.audit(p, tenantId, sessionId, 'session.terminal.open', { termId, argv: argv ?? null, cwd: req.cwd ?? null, cols: req.cols, rows: req.rows, pid });
      const hub = await hubFor(p, sessionId, termId, opts);
      return view(hub.info, hub);
    },

    async list(p, sessionId, opts = {}) {
      const { d, sandboxId } = await live(p, sessionId, opts);
      return (await d.listTerminals(sandboxId, opts)).map((t) => view(t, hubs.get(`${sessionId}/${t.execId}`)));
    },

    async get(p, sessionId, termId, opts = {}) {
      checkTermId(termId);
      const { d, sandboxId } = await live(p, sessionId, opts);
      const t = (await d.listTerminals(sandboxId, opts)).find((x) => x.execId === termId);
      if (!t) throw new NotFoundError('terminal', termId);
      return view(t, hubs.get(`${sessionId}/${termId}`));
    },

    async attach(p, sessionId, termId, sink, opts = {}) {
      checkTermId(termId);
      const hub = await hubFor(p, sessionId, termId, opts);
      await syncLease(hub);
      const watchOnly = p.kind === 'watcher';
      const c = hub.join(sink, watchOnly ? 'watch' : (opts.want ?? 'control'), holderName(p, opts.via ?? null), watchOnly);
      return {
        id: c.id,
        get role() {
          return hub.controller === c.id ? ('controller' as const) : ('watcher' as const);
        },
        write: async (data) => {
          await syncLease(hub);
          await hub.input(c, data, {});
        },
        resize: async (cols, rows) => {
          await syncLease(hub);
          await hub.resize(c, cols, rows, {});
        },
        async takeControl() {
          if (watchOnly) throw forbiddenForWatcher();
          await syncLease(hub);
          hub.leaseCheck(c, 'hold input on');
          if (hub.controller !== null && hub.controller !== c.id) return false;
          if (hub.exit || !hub.clients.has(c.id)) return false;
          hub.setController(c.id);
          return true;
        },
        detach: () => hub.leave(c.id),
      };
    },

    async kill(p, sessionId, termId, opts = {}) {
      checkTermId(termId);
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      if (!(await d.listTerminals(sandboxId, opts)).some((t) => t.execId === termId)) throw new NotFoundError('terminal', termId);
      const signalled = await d.killProcess(sandboxId, termId, opts);
      await m.audit(p, tenantId, sessionId, 'session.terminal.kill', { termId, signal: opts.signalNumber ?? 15, signalled });
      return { signalled };
    },

    async setController(p, sessionId, termId, clientId) {
      checkTermId(termId);
      await m.check(p, sessionId);
      const hub = hubs.get(`${sessionId}/${termId}`);
      if (!hub) throw new NotFoundError('terminal', termId);
      await syncLease(hub);
      hub.setController(clientId);
    },

    async ticket(p, sessionId, termId, opts = {}) {
      checkTermId(termId);
      await this.get(p, sessionId, termId, opts);
      return tickets.issue(p, `${sessionId}/${termId}`, opts.via ?? null);
    },

    redeem(ticket, sessionId, termId) {
      return tickets.redeem(ticket, `${sessionId}/${termId}`);
    },

    closeWatchers(sessionId) {
      for (const h of hubs.values()) if (h.sessionId === sessionId && !h.gone) h.dropWatchers();
    },

    leaseChanged(sessionId, holder) {
      for (const h of hubs.values()) if (h.sessionId === sessionId && !h.gone) h.setLease(holder);
    },

    async recording(p, sessionId, termId) {
      checkTermId(termId);
      await m.check(p, sessionId);
      await hubs.get(`${sessionId}/${termId}`)?.rec.flush();
      const { readFile } = await import('node:fs/promises');
      try {
        return await readFile(TerminalRecorder.path(m.recordDir, sessionId, termId), 'utf8');
      } catch {
        throw new NotFoundError('terminal', termId);
      }
    },

    async forget(sessionId) {
      for (const h of [...hubs.values()]) if (h.sessionId === sessionId) h.close('closed');
      await TerminalRecorder.removeSession(m.recordDir, sessionId);
    },

    async close() {
      for (const h of [...hubs.values()]) h.close('closed');
    },
  };
}
