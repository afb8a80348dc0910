/**
 * The console's sign-in: one-time links and cookie sessions.
 *
 * The browser never holds a token. A console session is an opaque random id in an HttpOnly, SameSite=Strict
 * cookie; the server keeps, in memory, the token it was opened with and authenticates that token through
 * engine.authenticate on every request, so a console user is exactly the principal the token is (one place
 * for access checks, and a revoked key ends its console sessions at once). Sessions end on sign-out, after
 * `idleMs` without a request the person made, and with the server.
 *
 * A watch-only link (engine/watch-links.ts) opens a console session too, whose principal is the link's
 * watcher, re-derived from the stored link on every request (so a revoked or expired link ends it at once).
 * Such a session reaches only WATCHER_ROUTES, the reads of its session's page; anything else is refused here
 * (forbidden, reason watch_only; another session's path: not found) before any route runs, and the engine
 * refuses the watcher everything but those reads again (gate-context.ts).
 *
 * Cross-site requests: a cookie-authenticated request that changes anything must carry the custom header
 * CONSOLE_CSRF_HEADER (a form or a simple cross-site fetch cannot set it without a CORS preflight, which this
 * server never grants) and, when the browser sends them, an Origin equal to the server's own and a
 * Sec-Fetch-Site of same-origin.
 */
import { randomBytes } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { AppError, ConfigError, NotFoundError, type Clock, type Principal } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { CONSOLE_BACKGROUND_HEADER, CONSOLE_COOKIE, CONSOLE_CSRF_HEADER } from '../protocol/console.js';
import type { Ctx, Env } from './context.js';

export const DEFAULT_CONSOLE_IDLE_MS = 15 * 60_000;
export const SIGNIN_LINK_TTL_MS = 60_000;

export interface ConsoleAuthOptions {
  /** A console session ends after this long without a request its person made, ms. Default 15 min. */
  idleMs?: number;
  /** How long a sign-in link's code can be exchanged, ms. Default 60000. */
  linkTtlMs?: number;
}

interface ConsoleSession {
  id: string;
  /** Short, shown name of the session (`cs_` + 8 chars): lease holders and audit entries use it, never the id. */
  handle: string;
  /** The token it was opened with; null for a watch-only link's session. */
  token: string | null;
  /** The watch link it was opened with, or null. */
  linkId: string | null;
  createdAt: number;
  lastActiveAt: number;
}

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

export class ConsoleAuth {
  readonly idleMs: number;
  readonly linkTtlMs: number;
  private readonly sessions = new Map<string, ConsoleSession>();
  /** code → the token it signs in with, until it expires or is used once. */
  private readonly codes = new Map<string, { token: string; expiresAt: number }>();

  constructor(
    private readonly engine: Engine,
    private readonly clock: Clock,
    o: ConsoleAuthOptions = {},
  ) {
    this.idleMs = o.idleMs ?? DEFAULT_CONSOLE_IDLE_MS;
    this.linkTtlMs = o.linkTtlMs ?? SIGNIN_LINK_TTL_MS;
    for (const [k, v] of Object.entries({ idleMs: this.idleMs, linkTtlMs: this.linkTtlMs })) {
      if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`console ${k}: must be a positive integer of ms, got ${v}`, { details: { field: k } });
    }
  }

  /** A one-time code for `token` (already authenticated by the caller), valid linkTtlMs. */
  issueCode(token: string): { code: string; expiresAt: number } {
    this.sweep();
    const code = randomBytes(24).toString('base64url');
    const expiresAt = this.clock.now() + this.linkTtlMs;
    this.codes.set(code, { token, expiresAt });
    return { code, expiresAt };
  }

  /** Exchanges a code (once), a token or a watch link's token for a new console session. */
  async signIn(input: { code: string } | { token: string } | { watch: string }): Promise<{ session: ConsoleSession; principal: Principal }> {
    if ('watch' in input) {
      const link = await this.engine.watchLinks.open(input.watch);
      return { session: this.open(null, link.id), principal: await this.engine.watchLinks.principalOf(link.id) };
    }
    let token: string;
    if ('code' in input) {
      const c = this.codes.get(input.code);
      this.codes.delete(input.code);
      if (!c) throw new AppError('unauthenticated', 'this sign-in link is not valid or was already used; run `berth console` for a new one');
      if (this.clock.now() >= c.expiresAt) throw new AppError('unauthenticated', 'this sign-in link has expired (links are valid for 60 s); run `berth console` for a new one');
      token = c.token;
    } else {
      token = input.token;
    }
    const principal = await this.engine.authenticate(token);
    if (principal.kind === 'agent') throw new AppError('forbidden', "an agent token cannot sign in to the console; use a tenant key or the root token");
    return { session: this.open(token, null), principal };
  }

  private open(token: string | null, linkId: string | null): ConsoleSession {
    const id = randomBytes(32).toString('base64url');
    const now = this.clock.now();
    const session: ConsoleSession = { id, handle: `cs_${id.slice(0, 8)}`, token, linkId, createdAt: now, lastActiveAt: now };
    this.sessions.set(id, session);
    return session;
  }

  /** The principal a console session acts as: its token's, or its watch link's watcher (re-checked each time). */
  principalOf(s: ConsoleSession): Promise<Principal> {
    return s.linkId !== null ? this.engine.watchLinks.principalOf(s.linkId) : this.engine.authenticate(s.token as string);
  }

  /** A watch link was revoked: the console sessions opened through it end now. */
  endWatchSessions(linkId: string): void {
    for (const [k, v] of this.sessions) if (v.linkId === linkId) this.sessions.delete(k);
  }

  signOut(id: string): ConsoleSession | undefined {
    const s = this.sessions.get(id);
    this.sessions.delete(id);
    return s;
  }

  /** The live session of a cookie value; an idle one is ended here. */
  lookup(id: string | undefined): { session: ConsoleSession | undefined; idledOut: ConsoleSession | undefined } {
    if (!id) return { session: undefined, idledOut: undefined };
    const s = this.sessions.get(id);
    if (!s) return { session: undefined, idledOut: undefined };
    if (this.clock.now() - s.lastActiveAt >= this.idleMs) {
      this.sessions.delete(id);
      return { session: undefined, idledOut: s };
    }
    return { session: s, idledOut: undefined };
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [k, v] of this.codes) if (now >= v.expiresAt) this.codes.delete(k);
    for (const [k, v] of this.sessions) if (now - v.lastActiveAt >= this.idleMs) this.sessions.delete(k);
  }

  /**
   * The /v1 middleware for cookie requests: runs before bearerAuth and does nothing when the request has an
   * Authorization header or no console cookie. Every state-changing console request is audited afterwards
   * with who made it and through which console session.
   */
  middleware(): MiddlewareHandler<Env> {
    const self = this;
    return async function consoleCookieAuth(c, next) {
      const cookie = getCookie(c, CONSOLE_COOKIE);
      if (c.req.header('authorization') || cookie === undefined) return next();
      const { session, idledOut } = self.lookup(cookie);
      if (idledOut) {
        const p = await self.principalOf(idledOut).catch(() => null);
        if (p) await self.engine.recordConsoleAction(p, { action: 'console.logoff', outcome: 'ok', data: { handle: idledOut.handle, reason: 'idle', idleS: Math.round(self.idleMs / 1000) } });
        throw new AppError('unauthenticated', 'your console session ended after inactivity; sign in again', { details: { reason: 'idle' } });
      }
      if (!session) throw new AppError('unauthenticated', 'not signed in to the console (no such console session); sign in again');
      if (!SAFE.has(c.req.method)) assertSameOrigin(c, true);
      let p: Principal;
      try {
        p = await self.principalOf(session);
      } catch (e) {
        if (session.linkId !== null) self.sessions.delete(session.id); // the link was revoked or expired: its session ends
        throw e;
      }
      if (p.kind === 'watcher') watcherMay(c.req.method, c.req.path, p.id);
      if (!c.req.header(CONSOLE_BACKGROUND_HEADER)) session.lastActiveAt = self.clock.now();
      c.set('principal', p);
      c.set('consoleHandle', session.handle);
      await next();
      if (!SAFE.has(c.req.method)) {
        await self.engine.recordConsoleAction(p, {
          action: 'console.action',
          outcome: c.res.status < 400 ? 'ok' : 'error',
          data: { handle: session.handle, method: c.req.method, path: c.req.path, status: c.res.status },
        });
      }
    };
  }
}

/**
 * Refuses a request a browser says came from another site: Origin (when sent) must be this server's own,
 * Sec-Fetch-Site (when sent) same-origin or none, and, for cookie requests, the custom header must be there.
 */
export function assertSameOrigin(c: Ctx, requireHeader: boolean): void {
  const origin = c.req.header('origin');
  const host = c.req.header('host');
  const own = new URL(c.req.url);
  const ok = (o: string) => {
    try {
      const u = new URL(o);
      return u.host === (host ?? own.host) && u.protocol === own.protocol;
    } catch {
      return false;
    }
  };
  if (origin !== undefined && !ok(origin)) throw new AppError('forbidden', `cross-site request refused (Origin ${origin} is not this server)`, { details: { reason: 'csrf' } });
  const site = c.req.header('sec-fetch-site');
  if (site !== undefined && site !== 'same-origin' && site !== 'none') throw new AppError('forbidden', `cross-site request refused (Sec-Fetch-Site: ${site})`, { details: { reason: 'csrf' } });
  if (requireHeader && c.req.header(CONSOLE_CSRF_HEADER) !== '1') {
    throw new AppError('forbidden', `a console request that changes state must carry the ${CONSOLE_CSRF_HEADER} header`, { details: { reason: 'csrf' } });
  }
}

/**
 * What a watch-only link's console session may ask for: the reads of its one session's page (record, plan,
 * control lease, audit timeline, live events, terminals and the desktop to watch and their tickets) and its
 * own sign-out.
 */
const WATCHER_ROUTES: ReadonlyArray<readonly [method: string, path: RegExp]> = [
  ['GET', /^\/v1\/sessions\/([^/]+)$/],
  ['GET', /^\/v1\/sessions\/([^/]+)\/(?:plan|control|terminals)$/],
  ['GET', /^\/v1\/sessions\/([^/]+)\/terminals\/[^/]+$/],
  ['POST', /^\/v1\/sessions\/([^/]+)\/terminals\/[^/]+\/tickets$/],
  ['POST', /^\/v1\/sessions\/([^/]+)\/desktop\/tickets$/],
  ['GET', /^\/v1\/audit$/],
  ['GET', /^\/v1\/events$/],
  ['GET', /^\/v1\/console\/me$/],
  ['POST', /^\/v1\/console\/signout$/],
];

/** Refuses a watcher's request outside WATCHER_ROUTES: another session is not found, anything else forbidden. */
export function watcherMay(method: string, path: string, sessionId: string): void {
  const other = /^\/v1\/sessions\/([^/]+)/.exec(path)?.[1];
  if (other !== undefined && decodeURIComponent(other) !== sessionId) throw new NotFoundError('session', decodeURIComponent(other));
  for (const [m, re] of WATCHER_ROUTES) if ((m === method || (m === 'GET' && method === 'HEAD')) && re.test(path)) return;
  throw new AppError('forbidden', 'a watch-only link may only look at its session, not change anything', { details: { reason: 'watch_only' } });
}
