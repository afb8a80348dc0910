/**
 * Ports of a session (issue 9 §3): a TCP connection to a server listening on loopback inside the sandbox,
 * for the HTTP/WebSocket proxy and `port-forward`. Opening one wakes a hibernated session (through the
 * manager's live step); each connection is audited when it opens (`session.port.open`) and when it closes
 * (`session.port.close`, with the bytes each way). Operator calls: agent tokens are refused, as for exec.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { InvalidArgumentError, type CallOptions, type Principal } from '../core/index.js';
import type { ProcessSteps } from './processes.js';

export interface PortConnection {
  /** Bytes both ways to the server in the sandbox; destroy() resets it. */
  socket: Duplex;
  /** The audit's name for this connection. */
  connectionId: string;
}

export interface PortOpenOptions {
  /** How the connection came (audited): the HTTP proxy, a TCP forward, a port link, a desktop's VNC view. Default 'proxy'. */
  via?: 'proxy' | 'forward' | 'link' | 'desktop';
  /** With via 'link': the link's id, audited with each connection. */
  linkId?: string;
}

export interface PortService {
  /** Connects to 127.0.0.1:port (then ::1) inside the session's sandbox; port_closed when nothing listens. */
  open(p: Principal, sessionId: string, port: number, opts?: CallOptions & PortOpenOptions): Promise<PortConnection>;
}

/** 1-65535, else invalid_argument naming the field. */
export function checkPortNumber(port: unknown): number {
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError('port: must be an integer from 1 to 65535', { details: { field: 'port', port } });
  }
  return port;
}

export function portService(m: ProcessSteps): PortService {
  return {
    async open(p, sessionId, port, opts = {}) {
      checkPortNumber(port);
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      const socket = await d.openTcp(sandboxId, port, opts);
      const connectionId = `con_${randomBytes(8).toString('hex')}`;
      const via = opts.via ?? 'proxy';
      const link = opts.linkId === undefined ? {} : { linkId: opts.linkId };
      await m.audit(p, tenantId, sessionId, 'session.port.open', { port, connectionId, via, ...link });
      let bytesIn = 0; // from the sandbox
      let bytesOut = 0; // to the sandbox
      socket.on('data', (c: Buffer) => (bytesIn += c.length));
      const write = socket.write.bind(socket) as (chunk: unknown, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        if (typeof chunk === 'string' || chunk instanceof Uint8Array) bytesOut += Buffer.byteLength(chunk as string);
        return write(chunk, ...rest);
      }) as typeof socket.write;
      socket.once('close', () => {
        m.meter(sessionId, { bytesIn: bytesOut, bytesOut: bytesIn });
        void m.audit(p, tenantId, sessionId, 'session.port.close', { port, connectionId, via, ...link, bytesToSandbox: bytesOut, bytesFromSandbox: bytesIn }).catch(() => undefined);
      });
      return { socket, connectionId };
    },
  };
}
