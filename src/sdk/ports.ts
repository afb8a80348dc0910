/**
 * Ports of a session (issue 9 §3): servers listening on loopback inside the sandbox, reached through the
 * Berth server. `url(port)` is the authenticated HTTP/WebSocket proxy address (send the bearer token);
 * `forward(port)` opens a local TCP port that tunnels each connection to the sandbox port (Node only:
 * import from 'berth/sdk/node', which installs the forwarder). `link(port)` makes a signed, expiring URL a
 * browser can open with no token; `links()` and `revokeLink(id)` manage them.
 */
import { AppError } from '../core/errors.js';
import type { PortLinkCreatedView, PortLinkListView, PortLinkView } from '../protocol/port-links.js';
import type { Transport } from './http.js';

export interface PortForwardOptions {
  /** Local port to listen on; 0 (default) picks a free one. */
  localPort?: number;
  /** Local interface. Default 127.0.0.1. */
  host?: string;
  /** Aborting it closes the forward. */
  signal?: AbortSignal;
  /** Called when one forwarded connection fails (nothing listening, session gone); the forward goes on. */
  onError?: (e: AppError) => void;
}

export interface PortForward {
  /** Where the forward listens, e.g. 127.0.0.1:43123. */
  host: string;
  port: number;
  /** `host:port`, ready for a client. */
  address: string;
  /** Stops listening and closes every forwarded connection. */
  close(): Promise<void>;
}

export type PortForwarder = (o: { url: string; token: string | undefined; sessionId: string; port: number } & PortForwardOptions) => Promise<PortForward>;

let forwarder: PortForwarder | undefined;

/** Installed by the Node entry (sdk/node.ts); a browser has no way to listen on a TCP port. */
export function registerPortForwarder(f: PortForwarder): void {
  forwarder = f;
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new AppError('invalid_argument', `port: must be an integer from 1 to 65535, got ${port}`, { details: { field: 'port', port } });
  }
}

export interface PortLinkOptions {
  /** Seconds the link works. Default 3600 (1 h); at most 604800 (7 days). */
  ttlS?: number;
  /** For people reading `links()`. Default none. */
  label?: string;
  signal?: AbortSignal;
}

export class SessionPorts {
  constructor(
    private readonly t: Transport,
    private readonly sessionId: string,
  ) {}

  /**
   * The proxy URL of a port, ending in '/': a request to url + 'path' reaches `/path` of the server on
   * 127.0.0.1:port inside the sandbox (with `X-Forwarded-Prefix` set). Needs the bearer token.
   */
  url(port: number): string {
    checkPort(port);
    return `${this.t.url(`/sessions/${encodeURIComponent(this.sessionId)}/ports/${port}`)}/`;
  }

  /** Forwards a local TCP port to `port` inside the sandbox until close() (Node entry only). */
  async forward(port: number, opts: PortForwardOptions = {}): Promise<PortForward> {
    checkPort(port);
    if (!forwarder) throw new AppError('unavailable', "ports.forward needs Node: import { Berth } from 'berth/sdk/node'");
    return forwarder({ url: this.t.url(''), token: this.t.o.token, sessionId: this.sessionId, port, ...opts });
  }

  /**
   * A signed, expiring link to `port` (`url`, shown this once): anyone holding it reaches the server on
   * 127.0.0.1:port in the sandbox with no token, until it expires, is revoked or the session ends.
   */
  link(port: number, opts: PortLinkOptions = {}): Promise<PortLinkCreatedView> {
    checkPort(port);
    const body = { port, ...(opts.ttlS === undefined ? {} : { ttlS: opts.ttlS }), ...(opts.label === undefined ? {} : { label: opts.label }) };
    return this.t.json<PortLinkCreatedView>('POST', `/sessions/${encodeURIComponent(this.sessionId)}/port-links`, { json: body, signal: opts.signal });
  }

  /** Every link of the session, in any state (without URLs: the server keeps only their hashes). */
  async links(opts: { signal?: AbortSignal } = {}): Promise<PortLinkView[]> {
    return (await this.t.json<PortLinkListView>('GET', `/sessions/${encodeURIComponent(this.sessionId)}/port-links`, { signal: opts.signal })).links;
  }

  /** Revokes a link: from now on it answers 404. Idempotent. */
  revokeLink(linkId: string, opts: { signal?: AbortSignal } = {}): Promise<PortLinkView> {
    return this.t.json<PortLinkView>('DELETE', `/sessions/${encodeURIComponent(this.sessionId)}/port-links/${encodeURIComponent(linkId)}`, { signal: opts.signal });
  }
}
