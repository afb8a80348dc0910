/**
 * Watch-only links (issue 10) over HTTP: an operator makes, lists and revokes them (tenant-scoped, audited);
 * a viewer who opens one gets a console session that reads its one session's page and nothing else: every
 * state-changing request and every other resource is refused by the server; its terminal is watch-only.
 * Expiry on a fake clock; revoking ends the open console sessions and the watchers' terminals.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Berth, Session } from '../../src/sdk/index.js';
import { FakeClock } from '../gate/harness.js';
import { startConsoleServer, until, type ConsoleServer } from './browser.js';

describe('watch-only links', () => {
  const clock = new FakeClock();
  let srv: ConsoleServer;
  let op: Berth;
  let other: Berth;
  let s: Session;
  let s2: Session;
  let termId: string;

  const signIn = (body: unknown) =>
    fetch(`${srv.url}/console/signin`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-berth-csrf': '1' }, body: JSON.stringify(body) });
  const cookieOf = (res: Response) => (res.headers.get('set-cookie') ?? '').split(';')[0] as string;
  const tokenOf = (url: string) => /#watch=(bwl_[A-Za-z0-9_-]+)$/.exec(url)![1]!;
  const req = (cookie: string, method: string, path: string, body?: unknown) =>
    fetch(`${srv.url}${path}`, { method, headers: { cookie, 'x-berth-csrf': '1', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const watch = async (ttlS?: number) => {
    const link = await op.console.createWatchLink(s.id, { label: 'for the on-call', ...(ttlS ? { ttlS } : {}) });
    const res = await signIn({ watch: tokenOf(link.url) });
    expect(res.status).toBe(200);
    return { link, cookie: cookieOf(res), me: (await res.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    srv = await startConsoleServer({ clock });
    const tenant = await srv.root.tenants.create('acme');
    op = srv.as(tenant.apiKey);
    other = srv.as((await srv.root.tenants.create('globex')).apiKey);
    s = await op.sessions.create({ objective: 'watched' });
    s2 = await op.sessions.create({ objective: 'not shared' });
    const t = await s.terminals.create({ cols: 80, rows: 24, mode: 'watch' });
    termId = t.termId;
    t.close();
  }, 60_000);

  afterAll(async () => {
    await srv?.close();
  });

  it('creates (201, url with an unguessable token, only its hash stored), lists and audits; tenant-scoped', async () => {
    const link = await op.console.createWatchLink(s.id, { ttlS: 600, label: 'pairing' });
    expect(link.linkId).toMatch(/^wlk_/);
    expect(link.url).toMatch(new RegExp(`^${srv.url}/#watch=bwl_[A-Za-z0-9_-]{43}$`));
    expect(Date.parse(link.expiresAt) - clock.now()).toBe(600_000);
    const stored = await srv.t.store.watchLinks.get(link.linkId);
    expect(JSON.stringify(stored)).not.toContain(tokenOf(link.url));
    const list = await op.console.watchLinks(s.id);
    expect(list.find((l) => l.linkId === link.linkId)).toMatchObject({ sessionId: s.id, label: 'pairing', state: 'active', revokedAt: null });
    // Another tenant sees no such session; bad bodies are invalid.
    await expect(other.console.createWatchLink(s.id)).rejects.toMatchObject({ code: 'not_found' });
    await expect(other.console.watchLinks(s.id)).rejects.toMatchObject({ code: 'not_found' });
    await expect(other.console.revokeWatchLink(s.id, link.linkId)).rejects.toMatchObject({ code: 'not_found' });
    await expect(op.console.createWatchLink(s.id, { ttlS: 5 })).rejects.toMatchObject({ code: 'invalid_argument' });
    const agent = srv.as(s.agentToken as string);
    await expect(agent.console.createWatchLink(s.id)).rejects.toMatchObject({ code: 'forbidden' });
    const actions = (await op.audit.query({ sessionId: s.id })).map((e) => e.action);
    expect(actions).toContain('console.watch_link.create');
  });

  it("a viewer reads the one session's page, and nothing else", async () => {
    const { cookie, me } = await watch();
    expect(me).toMatchObject({ kind: 'watcher', principal: `watcher:${s.id}`, watchSessionId: s.id });
    for (const path of [`/v1/sessions/${s.id}`, `/v1/sessions/${s.id}/plan`, `/v1/sessions/${s.id}/control`, `/v1/sessions/${s.id}/terminals`, `/v1/sessions/${s.id}/terminals/${termId}`, '/v1/console/me']) {
      expect([path, (await req(cookie, 'GET', path)).status]).toEqual([path, 200]);
    }
    // The timeline: its session's entries only, even when asking for all.
    const all = (await (await req(cookie, 'GET', '/v1/audit')).json()) as { entries: Array<{ sessionId: string | null }> };
    expect(all.entries.length).toBeGreaterThan(0);
    expect(all.entries.every((e) => e.sessionId === s.id)).toBe(true);
    // Other sessions: not found; everything else: forbidden (watch_only).
    for (const path of [`/v1/sessions/${s2.id}`, `/v1/sessions/${s2.id}/plan`, `/v1/sessions/${s2.id}/terminals`]) expect([path, (await req(cookie, 'GET', path)).status]).toEqual([path, 404]);
    expect((await req(cookie, 'GET', `/v1/audit?sessionId=${s2.id}`)).status).toBe(404);
    const refused: Array<[string, string, unknown?]> = [
      ['GET', '/v1/sessions'],
      ['GET', '/v1/approvals'],
      ['GET', '/v1/tools'],
      ['GET', '/v1/policy'],
      ['GET', `/v1/sessions/${s.id}/files?path=/etc/hostname`],
      ['GET', `/v1/sessions/${s.id}/watch-links`],
      ['GET', `/v1/sessions/${s.id}/terminals/${termId}/recording`],
      ['POST', `/v1/sessions/${s.id}/control`, {}],
      ['DELETE', `/v1/sessions/${s.id}/control`],
      ['POST', `/v1/sessions/${s.id}/pause`, {}],
      ['POST', `/v1/sessions/${s.id}/exec`, { command: ['true'] }],
      ['POST', `/v1/sessions/${s.id}/terminals`, {}],
      ['POST', `/v1/sessions/${s.id}/terminals/${termId}/kill`, {}],
      ['POST', `/v1/sessions/${s.id}/watch-links`, {}],
      ['POST', '/v1/console/links', {}],
      ['DELETE', `/v1/sessions/${s.id}`],
    ];
    for (const [m, path, body] of refused) {
      const res = await req(cookie, m, path, body);
      const err = ((await res.json()) as { error: { code: string; details?: { reason?: string } } }).error;
      expect([m, path, res.status, err.details?.reason]).toEqual([m, path, 403, 'watch_only']);
    }
    expect((await srv.as(srv.t.rootKey).sessions.get(s.id)).info.state).toBe('running');
  });

  it("the engine refuses a watcher on its own, without the console's route list", async () => {
    const e = srv.t.engine;
    const w = { kind: 'watcher' as const, id: s.id, tenantId: (await srv.t.store.sessions.get(s.id))!.tenantId };
    // What the page reads works.
    expect((await e.getSession(w, s.id)).id).toBe(s.id);
    await e.gate.getPlan(w, s.id);
    await e.gate.getControl(w, s.id);
    expect((await e.auditQuery(w, {})).every((x) => x.sessionId === s.id)).toBe(true);
    expect((await e.terminals.list(w, s.id)).length).toBeGreaterThan(0);
    // Everything else on its session: forbidden; another session: not found.
    const forbidden: Array<() => Promise<unknown>> = [
      () => e.listSessions(w),
      () => e.pause(w, s.id),
      () => e.terminateSession(w, s.id),
      () => e.gate.callTool(w, s.id, { tool: 'fs.read', args: { path: '/etc/hostname' } }),
      () => e.gate.listTools(w, s.id),
      () => e.gate.takeControl(w, s.id),
      () => e.gate.listApprovals(w),
      () => e.terminals.open(w, s.id, { cols: 80, rows: 24 }),
      () => e.terminals.kill(w, s.id, termId),
      () => e.terminals.recording(w, s.id, termId),
      () => e.watchLinks.create(w, s.id),
      () => e.watchLinks.list(w, s.id),
    ];
    for (const f of forbidden) await expect(f()).rejects.toMatchObject({ code: 'forbidden' });
    for (const f of [() => e.getSession(w, s2.id), () => e.gate.getPlan(w, s2.id), () => e.auditQuery(w, { sessionId: s2.id }), () => e.terminals.list(w, s2.id)]) {
      await expect(f()).rejects.toMatchObject({ code: 'not_found' });
    }
  });

  it('its terminal is watch-only: input and requests for input are refused by the engine', async () => {
    const { cookie } = await watch();
    const t = (await (await req(cookie, 'POST', `/v1/sessions/${s.id}/terminals/${termId}/tickets`, {})).json()) as { ticket: string };
    const ws = new WebSocket(`${srv.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/terminals/${termId}?mode=control&ticket=${encodeURIComponent(t.ticket)}`);
    const frames: Array<Record<string, any>> = [];
    ws.on('message', (d: Buffer, binary: boolean) => !binary && frames.push(JSON.parse(d.toString()) as Record<string, unknown>));
    await until('hello', () => frames.find((f) => f.type === 'hello'));
    expect(frames.find((f) => f.type === 'hello')!.role).toBe('watcher');
    ws.send(Buffer.from('echo nope\r'), { binary: true });
    ws.send(JSON.stringify({ type: 'control' }));
    await until('two refusals', () => frames.filter((f) => f.type === 'error').length >= 2);
    for (const f of frames.filter((x) => x.type === 'error')) expect(f.error).toMatchObject({ code: 'forbidden', details: { reason: 'watch_only' } });
    expect((await s.terminals.get(termId)).controller).toBeNull();
    ws.close();
  });

  it('revoking ends the link and the console sessions and terminal watchers opened through it', async () => {
    const { link, cookie } = await watch();
    const t = (await (await req(cookie, 'POST', `/v1/sessions/${s.id}/terminals/${termId}/tickets`, {})).json()) as { ticket: string };
    const ws = new WebSocket(`${srv.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/terminals/${termId}?mode=watch&ticket=${encodeURIComponent(t.ticket)}`);
    let closed = false;
    ws.on('close', () => (closed = true));
    await new Promise((ok) => ws.once('open', ok));
    const revoked = await op.console.revokeWatchLink(s.id, link.linkId);
    expect(revoked).toMatchObject({ linkId: link.linkId, state: 'revoked' });
    expect((await req(cookie, 'GET', `/v1/sessions/${s.id}`)).status).toBe(401);
    const again = await signIn({ watch: tokenOf(link.url) });
    expect(again.status).toBe(401);
    await until('the watcher terminal closed', () => closed);
    expect(await op.console.revokeWatchLink(s.id, link.linkId)).toMatchObject({ state: 'revoked' }); // idempotent
    expect((await op.audit.query({ sessionId: s.id })).map((e) => e.action)).toContain('console.watch_link.revoke');
  });

  it('expires after its ttl (fake clock), for open sessions and new sign-ins; one link serves several viewers', async () => {
    const a = await watch(120);
    const b = await signIn({ watch: tokenOf(a.link.url) });
    expect(b.status).toBe(200);
    expect((await req(cookieOf(b), 'GET', `/v1/sessions/${s.id}`)).status).toBe(200);
    clock.advance(121_000);
    expect((await req(a.cookie, 'GET', `/v1/sessions/${s.id}`)).status).toBe(401);
    expect((await req(cookieOf(b), 'GET', `/v1/sessions/${s.id}`)).status).toBe(401);
    expect((await signIn({ watch: tokenOf(a.link.url) })).status).toBe(401);
    expect((await op.console.watchLinks(s.id)).find((l) => l.linkId === a.link.linkId)!.state).toBe('expired');
    // A made-up token is refused the same way.
    expect((await signIn({ watch: `bwl_${'A'.repeat(43)}` })).status).toBe(401);
  });
});
