/**
 * The console's routes (issue 10). Under /v1 (bearer or console cookie, like every other route): control
 * leases, policy validation, the live event stream, sign-in links, who am I, sign-out. Outside /v1: the
 * sign-in exchange (no credential yet) and the built console itself.
 */
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { streamSSE } from 'hono/streaming';
import { AppError, InvalidArgumentError, type Clock, type Principal, type WatchLinkRecord } from '../../core/index.js';
import type { ControlInfo } from '../../engine/api.js';
import {
  CONSOLE_COOKIE,
  ConsoleLinkBodySchema,
  ConsoleSignInBodySchema,
  ReleaseControlQuerySchema,
  type ConsoleLinkView,
  type ConsoleMeView,
  type ControlView,
  type PolicyValidationView,
  WatchLinkCreateBodySchema,
  type WatchLinkCreatedView,
  type WatchLinkListView,
  type WatchLinkView,
} from '../../protocol/console.js';
import { EmptyBodySchema, TenantQuerySchema, iso, isoOrNull, toAuditEntryView } from '../../protocol/index.js';
import { assertSameOrigin, type ConsoleAuth } from '../console-auth.js';
import { idParam, principal, readJson, readQuery, readText, type Ctx, type Env, type RouteDeps } from '../context.js';

function toControlView(i: ControlInfo): ControlView {
  const l = i.lease;
  return { sessionId: i.sessionId, held: l !== null, holder: l?.holder ?? null, since: isoOrNull(l?.since ?? null), lastActivityAt: isoOrNull(l?.lastActivityAt ?? null), expiresAt: isoOrNull(l?.expiresAt ?? null) };
}

const who = (p: Principal) => `${p.kind}:${p.id}`;
const meView = (p: Principal, handle: string, idleLogoffS: number): ConsoleMeView => ({
  principal: who(p),
  kind: p.kind,
  tenantId: p.tenantId,
  handle,
  idleLogoffS,
  watchSessionId: p.kind === 'watcher' ? p.id : null,
});

function toWatchLinkView(l: WatchLinkRecord, now: number): WatchLinkView {
  return {
    linkId: l.id,
    sessionId: l.sessionId,
    label: l.label,
    createdBy: l.createdBy,
    createdAt: iso(l.createdAt),
    expiresAt: iso(l.expiresAt),
    revokedAt: isoOrNull(l.revokedAt),
    state: l.revokedAt !== null ? 'revoked' : now >= l.expiresAt ? 'expired' : 'active',
  };
}
/** How often the event stream looks for new audit entries, ms. */
const EVENTS_POLL_MS = 300;
/** An idle event stream sends a comment this often so proxies keep it open, ms. */
const EVENTS_PING_MS = 15_000;

export function consoleApiRoutes({ engine }: RouteDeps, auth: ConsoleAuth, clock: Clock): Hono<Env> {
  const r = new Hono<Env>();
  const via = (c: Ctx): string | null => c.get('consoleHandle') ?? null;

  // ---- control leases ----
  r.get('/sessions/:id/control', async (c) => c.json<ControlView>(toControlView(await engine.gate.getControl(principal(c), idParam(c, 'session')))));
  r.post('/sessions/:id/control', async (c) => {
    await readJson(c, EmptyBodySchema);
    return c.json<ControlView>(toControlView(await engine.gate.takeControl(principal(c), idParam(c, 'session'), via(c))));
  });
  r.delete('/sessions/:id/control', async (c) => {
    const q = readQuery(c, ReleaseControlQuerySchema);
    return c.json<ControlView>(toControlView(await engine.gate.releaseControl(principal(c), idParam(c, 'session'), via(c), q.force)));
  });

  // ---- policy validation (the console's inline errors; nothing is saved) ----
  r.post('/policy/validate', async (c) => {
    const q = readQuery(c, TenantQuerySchema);
    const text = await readText(c, (1 << 20) + 1);
    const v = await engine.gate.validatePolicy(principal(c), text, q.tenantId ? { tenantId: q.tenantId } : {});
    return c.json<PolicyValidationView>({ ok: v.ok, errors: [...v.errors], warnings: [...v.warnings] });
  });

  // ---- live events: the caller's audit entries as they are appended (server-sent events) ----
  r.get('/events', async (c) => {
    const p = principal(c);
    const after = c.req.query('after');
    if (after !== undefined && !/^\d{1,15}$/.test(after)) throw new InvalidArgumentError('after: must be an audit seq (a non-negative integer)', { details: { field: 'after', source: 'query' } });
    let seq = after !== undefined ? Number(after) : await headSeq(p);
    return streamSSE(c, async (stream) => {
      const signal = c.req.raw.signal;
      let lastSent = Date.now();
      await stream.writeSSE({ event: 'ready', data: JSON.stringify({ seq }) });
      while (!signal.aborted && !stream.aborted) {
        const entries = await engine.auditQuery(p, { afterSeq: seq, limit: 500 });
        for (const e of entries) {
          await stream.writeSSE({ event: 'audit', id: String(e.seq), data: JSON.stringify(toAuditEntryView(e)) });
          seq = e.seq;
          lastSent = Date.now();
        }
        if (Date.now() - lastSent > EVENTS_PING_MS) {
          await stream.write(': ping\n\n');
          lastSent = Date.now();
        }
        if (entries.length < 500) await stream.sleep(EVENTS_POLL_MS);
      }
    });
  });
  /** The newest seq the principal can see (pages through its entries; the console opens one stream per tab). */
  async function headSeq(p: Principal): Promise<number> {
    let seq = 0;
    for (;;) {
      const page = await engine.auditQuery(p, { afterSeq: seq, limit: 10_000 });
      if (page.length === 0) return seq;
      seq = (page[page.length - 1] as { seq: number }).seq;
      if (page.length < 10_000) return seq;
    }
  }

  // ---- sign-in links and the console session ----
  r.post('/console/links', async (c) => {
    if (via(c)) throw new AppError('forbidden', 'sign-in links are made with a token (berth console), not from a console session');
    const body = await readJson(c, ConsoleLinkBodySchema);
    const token = /^Bearer[ \t]+(\S+)/i.exec(c.req.header('authorization') ?? '')?.[1] as string;
    const { code, expiresAt } = auth.issueCode(token);
    const base = (body.baseUrl ?? new URL(c.req.url).origin).replace(/\/+$/, '');
    await engine.recordConsoleAction(principal(c), { action: 'console.link', outcome: 'ok', data: { expiresAt } });
    return c.json<ConsoleLinkView>({ url: `${base}/#signin=${code}`, expiresAt: new Date(expiresAt).toISOString() }, 201);
  });
  // ---- watch-only links (engine/watch-links.ts) ----
  r.post('/sessions/:id/watch-links', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, WatchLinkCreateBodySchema);
    const { link, token } = await engine.watchLinks.create(principal(c), id, { ...(body.ttlS !== undefined ? { ttlMs: body.ttlS * 1000 } : {}), ...(body.label !== undefined ? { label: body.label } : {}) });
    const base = (body.baseUrl ?? new URL(c.req.url).origin).replace(/\/+$/, '');
    return c.json<WatchLinkCreatedView>({ linkId: link.id, url: `${base}/#watch=${token}`, expiresAt: iso(link.expiresAt) }, 201);
  });
  r.get('/sessions/:id/watch-links', async (c) => {
    const links = await engine.watchLinks.list(principal(c), idParam(c, 'session'));
    const now = clock.now();
    return c.json<WatchLinkListView>({ links: links.map((l) => toWatchLinkView(l, now)) });
  });
  r.delete('/sessions/:id/watch-links/:linkId', async (c) => {
    const l = await engine.watchLinks.revoke(principal(c), idParam(c, 'session'), idParam(c, 'watchLink', 'linkId'));
    auth.endWatchSessions(l.id);
    return c.json<WatchLinkView>(toWatchLinkView(l, clock.now()));
  });

  r.get('/console/me', (c) => {
    const p = principal(c);
    return c.json<ConsoleMeView>(meView(p, via(c) ?? '', Math.round(auth.idleMs / 1000)));
  });
  r.post('/console/signout', async (c) => {
    const id = getCookie(c, CONSOLE_COOKIE);
    const s = id ? auth.signOut(id) : undefined;
    deleteCookie(c, CONSOLE_COOKIE, { path: '/' });
    if (s) await engine.recordConsoleAction(principal(c), { action: 'console.signout', outcome: 'ok', data: { handle: s.handle } });
    return c.json({ ok: true as const });
  });
  return r;
}

/** POST /console/signin: a one-time code or a token → the console cookie. */
export function consoleSignInRoutes({ engine }: RouteDeps, auth: ConsoleAuth): Hono<Env> {
  const r = new Hono<Env>();
  r.post('/console/signin', async (c) => {
    // Login CSRF: a cross-site page must not sign a browser in under someone else's key.
    assertSameOrigin(c, true);
    const body = await readJson(c, ConsoleSignInBodySchema);
    const { session, principal: p } = await auth.signIn(body);
    setCookie(c, CONSOLE_COOKIE, session.id, { httpOnly: true, sameSite: 'Strict', path: '/', secure: new URL(c.req.url).protocol === 'https:' });
    const withWhat = 'code' in body ? 'link' : 'watch' in body ? 'watch_link' : 'token';
    await engine.recordConsoleAction(p, { action: 'console.signin', outcome: 'ok', data: { handle: session.handle, with: withWhat, ...(session.linkId ? { linkId: session.linkId } : {}) } });
    return c.json<ConsoleMeView>(meView(p, session.handle, Math.round(auth.idleMs / 1000)));
  });
  return r;
}

// ---- the built console (dist/console, made by `npm run build`) ----

const TYPES: Record<string, string> = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.html': 'text/html; charset=utf-8', '.svg': 'image/svg+xml', '.woff2': 'font/woff2' };

/** dist/console of this package, from src/server/routes (tests) or dist/src/server/routes (installed). */
export function consoleAssetsDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) return join(dir, 'dist', 'console');
    dir = dirname(dir);
  }
  return resolve('dist', 'console');
}

const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

export function consoleStaticRoutes(dir: string = consoleAssetsDir()): Hono<Env> {
  const r = new Hono<Env>();
  r.get('/', async (c) => {
    let html: string;
    try {
      html = await readFile(join(dir, 'index.html'), 'utf8');
    } catch {
      throw new AppError('unavailable', 'the console is not built into this package (run `npm run build`)');
    }
    return c.body(html, 200, { 'content-type': TYPES['.html'] as string, 'cache-control': 'no-store', ...SECURITY_HEADERS });
  });
  r.get('/assets/:file', async (c) => {
    const file = c.req.param('file');
    const ext = /\.[a-z0-9]+$/.exec(file)?.[0] ?? '';
    if (!/^[A-Za-z0-9._-]+$/.test(file) || file.startsWith('.') || !TYPES[ext]) throw new AppError('not_found', `no console asset ${file}`);
    let body: Buffer;
    try {
      body = await readFile(join(dir, 'assets', file));
    } catch {
      throw new AppError('not_found', `no console asset ${file}`);
    }
    // Vite names assets by content hash: they never change under a name.
    return c.body(new Uint8Array(body), 200, { 'content-type': TYPES[ext] as string, 'cache-control': 'public, max-age=31536000, immutable', ...SECURITY_HEADERS });
  });
  return r;
}
