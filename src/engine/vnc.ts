/**
 * The human side of a session's desktop (issue 11): connections to its VNC server (core/desktop.ts,
 * DESKTOP_VNC_PORT on the sandbox's loopback) for the console's live view, through the port service (so
 * each one wakes a hibernated session and is audited, `session.port.open`/`close` with via 'desktop').
 *
 * Who may look: an operator of the session, or a watch-only link's viewer of its own session. Who may act:
 * only the holder of the session's control lease (leaseStanding 'holder'). While nobody holds it the agent
 * drives the desktop (its `computer` tool), so a person's input would fight it; watchers never act. The
 * answer is `mayInput()`, read on every input message (server/rfb-filter.ts), so it follows the lease as it
 * starts, ends or lapses mid-connection.
 */
import type { Duplex } from 'node:stream';
import { AppError, DESKTOP_VNC_PORT, type CallOptions, type DesktopSettings, type Principal, type SessionRecord } from '../core/index.js';
import { holderName, leaseStanding } from './gate-control.js';
import { requireOperator } from './gate-context.js';
import type { PortService } from './ports.js';
import type { Redeemed, TicketStore } from './tickets.js';

export interface VncConnection {
  /** Bytes both ways to the VNC server; destroy() ends the connection. */
  socket: Duplex;
  /** The audit's name for this connection. */
  connectionId: string;
  /** The desktop's screen. */
  screen: DesktopSettings;
  /** Whether this viewer's input may reach the desktop at this instant (it holds the control lease). */
  mayInput(): boolean;
}

export interface VncService {
  /**
   * Connects p (through `via`, a console session's handle) to the session's VNC server. Errors: not_found
   * (session), forbidden (an agent token), invalid_state with details.reason no_desktop (created without one).
   */
  connect(p: Principal, sessionId: string, opts?: CallOptions & { via?: string | null }): Promise<VncConnection>;
  /** A single-use ticket standing for p (and `via`) on the session's desktop, for a browser WebSocket. */
  ticket(p: Principal, sessionId: string, opts?: CallOptions & { via?: string | null }): Promise<{ ticket: string; expiresAt: number }>;
  /** Redeems a ticket (once); null when unknown, used, expired or for another session. */
  redeem(ticket: string, sessionId: string): Redeemed | null;
  /** A watch link was revoked: the session's watch-only viewers are let go. */
  closeWatchers(sessionId: string): void;
}

export interface VncSteps {
  /** The port service to reach DESKTOP_VNC_PORT with; its live step admits a watcher of its own session. */
  ports: PortService;
  /** The session record as p may see it (not found otherwise). */
  session(p: Principal, sessionId: string): Promise<SessionRecord>;
  /** The holder of the session's live control lease right now (ControlLeases.holderNow). */
  leaseHolder(sessionId: string): string | null;
  tickets: TicketStore;
}

export function noDesktopError(sessionId: string): AppError {
  return new AppError('invalid_state', `no_desktop: session ${sessionId} was created without a desktop (create one with desktop: true)`, {
    details: { reason: 'no_desktop', sessionId },
  });
}

export function vncService(m: VncSteps): VncService {
  const watchers = new Map<string, Set<Duplex>>();

  /** The screen of a session p may look at: an operator's or its own watcher's. */
  const screenFor = async (p: Principal, sessionId: string): Promise<DesktopSettings> => {
    if (p.kind !== 'watcher') requireOperator(p, sessionId);
    const r = await m.session(p, sessionId);
    if (!r.settings.desktop) throw noDesktopError(sessionId);
    return r.settings.desktop;
  };

  return {
    async connect(p, sessionId, opts = {}) {
      const screen = await screenFor(p, sessionId);
      const { socket, connectionId } = await m.ports.open(p, sessionId, DESKTOP_VNC_PORT, { ...opts, via: 'desktop' });
      const client = { watchOnly: p.kind === 'watcher', holder: holderName(p, opts.via ?? null) };
      if (client.watchOnly) {
        let set = watchers.get(sessionId);
        if (!set) watchers.set(sessionId, (set = new Set()));
        set.add(socket);
        socket.once('close', () => {
          set.delete(socket);
          if (!set.size && watchers.get(sessionId) === set) watchers.delete(sessionId);
        });
      }
      return { socket, connectionId, screen, mayInput: () => leaseStanding(client, m.leaseHolder(sessionId)) === 'holder' };
    },

    async ticket(p, sessionId, opts = {}) {
      await screenFor(p, sessionId);
      return m.tickets.issue(p, `${sessionId}/desktop`, opts.via ?? null);
    },

    redeem(ticket, sessionId) {
      return m.tickets.redeem(ticket, `${sessionId}/desktop`);
    },

    closeWatchers(sessionId) {
      for (const s of watchers.get(sessionId) ?? []) s.destroy();
    },
  };
}
