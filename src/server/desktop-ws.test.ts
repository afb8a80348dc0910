/**
 * The desktop's live view over real HTTP: the real engine and gate over the in-memory driver, with a fake
 * VNC server listening on the sandbox's DESKTOP_VNC_PORT (a port of the driver, not a double of the engine).
 * The memory driver cannot start a desktop, so the session's record is given one directly. What reaches the
 * VNC server is what the test asserts: the handshake (shared forced on), update requests always, input only
 * from the holder of the control lease, and what the lease does as it starts, ends and lapses (fake clock).
 */
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { DESKTOP_VNC_PORT, type Principal } from '../core/index.js';
import { DEFAULT_CONTROL_IDLE_MS } from '../engine/gate-control.js';
import { desktopViewPaths } from '../protocol/index.js';
import { FakeClock } from '../../test/gate/harness.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';
import { createApp } from './app.js';
import { silentLogger } from './log.js';
import { startServer, type RunningServer } from './serve.js';
import { upgradeHandlers } from './upgrades.js';

const HANDSHAKE = Buffer.concat([Buffer.from('RFB 003.008\n'), Buffer.from([1, 0])]);
const click = (x: number) => Buffer.from([5, 1, x >> 8, x & 0xff, 0, 10]);
const KEY_A = Buffer.from([4, 1, 0, 0, 0, 0, 0, 0x61]);
const UPDATE = Buffer.from([3, 1, 0, 0, 0, 0, 5, 0, 3, 32]);

/** What one connection to the fake VNC server received. */
class Upstream {
  bytes = Buffer.alloc(0);
  constructor(readonly socket: Duplex) {
    socket.on('data', (c: Buffer) => (this.bytes = Buffer.concat([this.bytes, c])));
    socket.on('error', () => undefined);
    socket.write('RFB 003.008\n');
  }
  has(b: Buffer): boolean {
    return this.bytes.includes(b);
  }
}

class Viewer {
  readonly ws: WebSocket;
  readonly got: Buffer[] = [];
  readonly opened: Promise<void>;
  closed: { code: number; reason: string } | null = null;
  constructor(url: string, headers: Record<string, string> = {}) {
    this.ws = new WebSocket(url, ['binary'], { headers });
    this.ws.on('message', (d: Buffer) => this.got.push(d));
    this.ws.on('close', (code, reason) => (this.closed = { code, reason: reason.toString() }));
    this.opened = new Promise((ok, fail) => (this.ws.once('open', () => ok()), this.ws.once('error', fail)));
  }
  send(b: Buffer): void {
    this.ws.send(b, { binary: true });
  }
}

/** The HTTP answer to an upgrade that is refused. */
function refused(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on('open', () => reject(new Error('upgrade was accepted')));
    ws.on('error', () => undefined);
    ws.on('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
  });
}

async function until<T>(what: string, f: () => T | undefined | false | Promise<T | undefined | false>, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('GET /v1/sessions/:id/desktop/vnc', () => {
  const clock = new FakeClock();
  let t: TestEngine;
  let http: RunningServer;
  let op: Principal;
  let opKey: string;
  let desk: string;
  let plain: string;
  let agentToken: string;
  const upstreams: Upstream[] = [];
  const viewers: Viewer[] = [];
  const wsUrl = (id: string, q = '') => `${http.url.replace(/^http/, 'ws')}${desktopViewPaths(id).vnc}${q}`;
  const bearer = (k: string) => ({ authorization: `Bearer ${k}` });
  const open = async (url: string, headers: Record<string, string> = {}) => {
    const v = new Viewer(url, headers);
    viewers.push(v);
    await v.opened;
    return v;
  };
  /** A viewer through the handshake; returns it and the fake server's end. */
  const connect = async (url: string, headers: Record<string, string> = {}) => {
    const n = upstreams.length;
    const v = await open(url, headers);
    const up = await until('upstream', () => upstreams[n]);
    v.send(HANDSHAKE);
    await until('handshake upstream', () => up.bytes.length >= 14);
    return { v, up };
  };

  beforeAll(async () => {
    t = await createTestEngine({ clock });
    http = await startServer({ app: createApp({ engine: t.engine, clock }), host: '127.0.0.1', port: 0, graceMs: 200, upgrades: { handlers: upgradeHandlers(t.engine, silentLogger) } });
    const tenant = await t.engine.createTenant(t.root, 'acme');
    opKey = tenant.apiKey;
    op = await t.engine.authenticate(opKey);
    const d = await t.engine.createSession(op, { objective: 'desktop view' });
    desk = d.session.id;
    agentToken = d.agentToken;
    plain = (await t.engine.createSession(op, {})).session.id;
    // The memory driver runs no desktop: the record says there is one, and a fake VNC server listens.
    const r = (await t.store.sessions.get(desk))!;
    await t.store.sessions.put({ ...r, settings: { ...r.settings, desktop: { width: 1280, height: 800 } } });
    await t.driver.listenTcp(r.sandboxId!, DESKTOP_VNC_PORT, (socket) => void upstreams.push(new Upstream(socket)));
  });

  afterAll(async () => {
    for (const v of viewers) v.ws.terminate();
    await http?.close();
    await t?.close();
  });

  it('refuses before the upgrade with the usual error body', async () => {
    expect(await refused(wsUrl(desk))).toMatchObject({ status: 401, body: { error: { code: 'unauthenticated' } } });
    expect(await refused(wsUrl(desk, '?ticket=ttk_nope'))).toMatchObject({ status: 401, body: { error: { code: 'unauthenticated' } } });
    expect(await refused(wsUrl('ses_00000000000000000000'), bearer(opKey))).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    expect(await refused(wsUrl('nonsense'), bearer(opKey))).toMatchObject({ status: 404 });
    expect(await refused(wsUrl(plain), bearer(opKey))).toMatchObject({ status: 409, body: { error: { code: 'invalid_state', details: { reason: 'no_desktop' } } } });
    expect(await refused(wsUrl(desk), bearer(agentToken))).toMatchObject({ status: 403, body: { error: { code: 'forbidden' } } });
    const other = await t.engine.createTenant(t.root, 'other');
    expect(await refused(wsUrl(desk), bearer(other.apiKey))).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    // The ticket route answers the same way.
    await expect(t.engine.vnc.ticket(op, plain)).rejects.toMatchObject({ code: 'invalid_state', details: { reason: 'no_desktop' } });
    expect(upstreams).toHaveLength(0); // nothing reached the VNC server
  });

  it('answers the binary subprotocol and passes the server\'s bytes on; forces the shared flag', async () => {
    const { v, up } = await connect(wsUrl(desk), bearer(opKey));
    expect(v.ws.protocol).toBe('binary');
    await until('server version', () => v.got.length > 0);
    expect(Buffer.concat(v.got).toString()).toBe('RFB 003.008\n');
    expect(up.bytes.subarray(0, 14)).toEqual(Buffer.concat([Buffer.from('RFB 003.008\n'), Buffer.from([1, 1])]));
    up.socket.write(Buffer.alloc(100_000, 7)); // a screen update, passed on whole
    await until('update', () => Buffer.concat(v.got).length === 12 + 100_000);
    const audit = await t.engine.auditQuery(t.root, { sessionId: desk });
    expect(audit.find((e) => e.action === 'session.port.open')?.data).toMatchObject({ port: DESKTOP_VNC_PORT, via: 'desktop' });
    v.ws.close();
  });

  it('input reaches the desktop only from the holder of the control lease, following it as it moves', async () => {
    const { v, up } = await connect(wsUrl(desk), bearer(opKey));
    // Nobody holds the lease: the agent drives; a person's input is dropped, update requests pass.
    v.send(Buffer.concat([click(1), KEY_A, UPDATE]));
    await until('update request', () => up.has(UPDATE));
    expect(up.has(click(1)) || up.has(KEY_A)).toBe(false);

    await t.engine.gate.takeControl(op, desk, null);
    v.send(click(2));
    await until('holder click', () => up.has(click(2)));

    // Someone else takes over: this viewer's input is dropped again; theirs passes.
    await t.engine.gate.releaseControl(op, desk, null);
    await t.engine.gate.takeControl(t.root, desk, null);
    const root = await connect(wsUrl(desk), bearer(t.rootKey));
    v.send(click(3));
    root.v.send(click(4));
    await until('root click', () => root.up.has(click(4)));
    await sleep(50);
    expect(up.has(click(3))).toBe(false);

    // The lease lapses (no sweep yet): input stops at once.
    clock.advance(DEFAULT_CONTROL_IDLE_MS + 1);
    root.v.send(Buffer.concat([click(5), UPDATE]));
    await until('update after lapse', () => root.up.bytes.lastIndexOf(UPDATE) > root.up.bytes.indexOf(click(4)));
    expect(root.up.has(click(5))).toBe(false);
    await t.engine.sweepIdle();
    v.ws.close();
    root.v.ws.close();
  });

  it('a ticket is single use, for one session, and carries its console session into the lease', async () => {
    const via = 'cs_feedface';
    await t.engine.gate.takeControl(op, desk, via);
    const { ticket } = await t.engine.vnc.ticket(op, desk, { via });
    expect(await refused(wsUrl(plain, `?ticket=${ticket}`))).toMatchObject({ status: 401 }); // spent on the wrong session
    const { ticket: good } = await t.engine.vnc.ticket(op, desk, { via });
    const console_ = await connect(wsUrl(desk, `?ticket=${good}`));
    expect(await refused(wsUrl(desk, `?ticket=${good}`))).toMatchObject({ status: 401 });
    // The same operator by bearer token is not this console session: not the holder.
    const bare = await connect(wsUrl(desk), bearer(opKey));
    console_.v.send(click(6));
    bare.v.send(click(7));
    await until('console click', () => console_.up.has(click(6)));
    await sleep(50);
    expect(bare.up.has(click(7))).toBe(false);
    await t.engine.gate.releaseControl(op, desk, via);
    console_.v.ws.close();
    bare.v.ws.close();
  });

  it('a watcher looks and never acts; revoking its link ends the view', async () => {
    const { link } = await t.engine.watchLinks.create(op, desk);
    const watcher = await t.engine.watchLinks.principalOf(link.id);
    const { ticket } = await t.engine.vnc.ticket(watcher, desk, { via: 'cs_watch' });
    const w = await connect(wsUrl(desk, `?ticket=${ticket}`));
    w.v.send(Buffer.concat([click(8), UPDATE]));
    await until('watcher update request', () => w.up.has(UPDATE));
    expect(w.up.has(click(8))).toBe(false);
    await expect(t.engine.vnc.ticket(watcher, plain)).rejects.toMatchObject({ code: 'not_found' });
    await t.engine.watchLinks.revoke(op, desk, link.id);
    await until('watcher closed', () => w.v.closed);
  });

  it('closes on a stream it cannot read, and on text frames', async () => {
    const a = await connect(wsUrl(desk), bearer(opKey));
    a.v.send(Buffer.from([7, 0, 0, 0]));
    const closed = await until('closed', () => a.v.closed);
    expect(closed).toEqual({ code: 1002, reason: 'rfb: unknown client message type 7' });
    await until('upstream closed', () => a.up.socket.destroyed || a.up.socket.readableEnded);

    const b = await connect(wsUrl(desk), bearer(opKey));
    b.v.ws.send('hello');
    expect((await until('closed', () => b.v.closed))?.code).toBe(1003);
  });

  it('the VNC server ending the connection closes the view', async () => {
    const { v, up } = await connect(wsUrl(desk), bearer(opKey));
    up.socket.end();
    expect((await until('closed', () => v.closed))?.code).toBe(1000);
  });
});
