/**
 * The web console's parts of the API, usable by any client: control leases (take a session over from its
 * agent, hand it back), sign-in links, the console session, and the live event stream.
 *
 *   await berth.control.take(sessionId);      // the agent's calls now answer human_control
 *   await berth.control.release(sessionId);   // the agent's next call runs
 *   const { url } = await berth.console.link(); // a one-time sign-in link, valid 60 s
 *
 * Browser-safe: fetch and web streams only.
 */
import { AppError } from '../core/errors.js';
import type { AuditEntryView } from '../protocol/types.js';
import type { ConsoleLinkView, ConsoleMeView, ControlView, PolicyValidationView, WatchLinkCreatedView, WatchLinkListView, WatchLinkView } from '../protocol/console.js';
import type { Transport } from './http.js';
import type { CallOpts } from './session.js';

const ses = (id: string) => `/sessions/${encodeURIComponent(id)}`;

export class ControlApi {
  constructor(private readonly t: Transport) {}

  /** Who holds the session's control lease, if anyone. */
  get(sessionId: string, opts: CallOpts = {}): Promise<ControlView> {
    return this.t.json<ControlView>('GET', `${ses(sessionId)}/control`, { signal: opts.signal });
  }
  /** Takes the lease (conflict when someone else holds it); taking it again renews it. */
  take(sessionId: string, opts: CallOpts = {}): Promise<ControlView> {
    return this.t.json<ControlView>('POST', `${ses(sessionId)}/control`, { json: {}, signal: opts.signal });
  }
  /** Hands back; `force` ends someone else's lease. */
  release(sessionId: string, opts: CallOpts & { force?: boolean } = {}): Promise<ControlView> {
    return this.t.json<ControlView>('DELETE', `${ses(sessionId)}/control`, { query: { force: opts.force ? 'true' : undefined }, signal: opts.signal });
  }
}

export class ConsoleApi {
  constructor(private readonly t: Transport) {}

  /** A one-time sign-in link for this client's token, valid 60 s. */
  link(opts: CallOpts & { baseUrl?: string } = {}): Promise<ConsoleLinkView> {
    return this.t.json<ConsoleLinkView>('POST', '/console/links', { json: opts.baseUrl ? { baseUrl: opts.baseUrl } : {}, signal: opts.signal });
  }
  /** Exchanges a link's code (once) or a token for the console cookie (browsers: the response sets it). */
  signIn(input: { code: string } | { token: string } | { watch: string }, opts: CallOpts = {}): Promise<ConsoleMeView> {
    return this.t.json<ConsoleMeView>('POST', '/console/signin', { root: true, json: input, signal: opts.signal });
  }
  /**
   * A watch-only link to one session (read-only console view for whoever opens it) that works `ttlS` seconds
   * (default 3600) unless revoked. The url carries its token: share it, it is shown only here.
   */
  createWatchLink(sessionId: string, opts: CallOpts & { ttlS?: number; label?: string; baseUrl?: string } = {}): Promise<WatchLinkCreatedView> {
    const { signal, ...body } = opts;
    return this.t.json<WatchLinkCreatedView>('POST', `/sessions/${encodeURIComponent(sessionId)}/watch-links`, { json: body, signal });
  }
  /** A session's watch links (active, expired and revoked), oldest first. */
  async watchLinks(sessionId: string, opts: CallOpts = {}): Promise<WatchLinkView[]> {
    return (await this.t.json<WatchLinkListView>('GET', `/sessions/${encodeURIComponent(sessionId)}/watch-links`, { signal: opts.signal })).links;
  }
  /** Revokes a watch link: it stops working, and consoles open through it end. */
  revokeWatchLink(sessionId: string, linkId: string, opts: CallOpts = {}): Promise<WatchLinkView> {
    return this.t.json<WatchLinkView>('DELETE', `/sessions/${encodeURIComponent(sessionId)}/watch-links/${encodeURIComponent(linkId)}`, { signal: opts.signal });
  }
  me(opts: CallOpts = {}): Promise<ConsoleMeView> {
    return this.t.json<ConsoleMeView>('GET', '/console/me', { signal: opts.signal });
  }
  async signOut(opts: CallOpts = {}): Promise<void> {
    await this.t.json('POST', '/console/signout', { json: {}, signal: opts.signal });
  }
  /** Checks Cedar text as a policy update would, without saving it. */
  validatePolicy(text: string, opts: CallOpts & { tenantId?: string } = {}): Promise<PolicyValidationView> {
    return this.t.json<PolicyValidationView>('POST', '/policy/validate', { body: text, query: { tenantId: opts.tenantId }, signal: opts.signal });
  }

  /**
   * Audit entries visible to the caller as they are appended (server-sent events), from `after` (a seq;
   * default: from now). Ends when the signal aborts or the server closes the stream.
   */
  async *events(opts: CallOpts & { after?: number } = {}): AsyncGenerator<AuditEntryView> {
    const { res, signal } = await this.t.send('GET', '/events', { query: { after: opts.after }, signal: opts.signal, deadline: false });
    if (!res.body) throw new AppError('internal', 'GET /events: no body');
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        let r: ReadableStreamReadResult<Uint8Array>;
        try {
          r = await reader.read();
        } catch (e) {
          throw this.t.failure(e, signal, 'GET /events');
        }
        if (r.done) return;
        buf += dec.decode(r.value, { stream: true });
        let end: number;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let event = 'message';
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          }
          if (event === 'audit' && data.length) yield JSON.parse(data.join('\n')) as AuditEntryView;
        }
      }
    } finally {
      await reader.cancel().catch(() => undefined);
    }
  }
}
