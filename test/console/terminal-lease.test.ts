/**
 * Terminal input follows the session's control lease, decided by the engine (issue 10): while a lease is
 * held only its holder may hold input; a controller who is not the holder loses it when the lease starts
 * (a role frame), others' input and requests for input are refused (forbidden, control_lease_held, naming
 * the holder), the lease's end reaches every client, and the recording marks both. The real engine and
 * gate over the in-memory driver (a line-discipline terminal), raw WebSocket clients.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Berth, Session } from '../../src/sdk/index.js';
import { FakeClock } from '../gate/harness.js';
import { startConsoleServer, until, type ConsoleServer } from './browser.js';

class Client {
  text = '';
  controls: Array<Record<string, any>> = [];
  readonly ws: WebSocket;
  readonly open: Promise<void>;
  constructor(url: string, token: string) {
    this.ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    this.open = new Promise((ok, fail) => (this.ws.once('open', () => ok()), this.ws.once('error', fail)));
    this.ws.on('message', (d: Buffer, binary: boolean) => {
      if (binary) this.text += d.toString('utf8');
      else this.controls.push(JSON.parse(d.toString('utf8')) as Record<string, unknown>);
    });
  }
  async hello(): Promise<Record<string, any>> {
    return until('hello', () => this.controls.find((c) => c.type === 'hello'));
  }
  last(type: string): Record<string, any> | undefined {
    return this.controls.filter((c) => c.type === type).at(-1);
  }
  type(s: string): void {
    this.ws.send(Buffer.from(s), { binary: true });
  }
  askControl(): void {
    this.ws.send(JSON.stringify({ type: 'control' }));
  }
}

describe('terminal input and the control lease', () => {
  let srv: ConsoleServer;
  let op: Berth;
  let opKey: string;
  let s: Session;
  let termId: string;
  const clients: Client[] = [];
  const connect = async (token: string, mode: 'control' | 'watch' = 'control') => {
    const c = new Client(`${srv.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/terminals/${termId}?mode=${mode}`, token);
    clients.push(c);
    await c.open;
    await c.hello();
    return c;
  };

  beforeAll(async () => {
    srv = await startConsoleServer();
    const tenant = await srv.root.tenants.create('acme');
    opKey = tenant.apiKey;
    op = srv.as(opKey);
    s = await op.sessions.create({ objective: 'lease and terminal' });
    const t = await s.terminals.create({ cols: 80, rows: 24, mode: 'watch' });
    termId = t.termId;
    t.close();
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) c.ws.close();
    await srv?.close();
  });

  it('without a lease, the first client asking gets input (as before)', async () => {
    const a = await connect(opKey);
    expect(await a.hello()).toMatchObject({ role: 'controller', leaseHolder: null });
    a.type('echo before-lease\r');
    await until('echo', () => a.text.includes('before-lease'));
    a.ws.close();
    await sleep(50);
  });

  it('a lease moves input to its holder: others lose it, are refused by name, and see its end', async () => {
    const a = await connect(opKey); // operator:ten_… (bearer): not the holder below
    expect((await a.hello()).role).toBe('controller');

    const lease = await srv.root.control.take(s.id);
    expect(lease.holder).toBe('root:root');
    // The controller who is not the holder watches now; told with a role frame naming the holder.
    await until('role frame', () => a.controls.some((c) => c.type === 'role' && c.role === 'watcher' && c.leaseHolder === 'root:root'));
    expect((await s.terminals.get(termId)).controller).toBeNull();

    a.type('echo from-a\r');
    await until('refusal', () => a.last('error'));
    expect(a.last('error')!.error).toMatchObject({ code: 'forbidden', details: { reason: 'control_lease_held', holder: 'root:root' } });
    a.controls.length = 0;
    a.askControl();
    await until('refusal of control', () => a.last('error'));
    expect(a.last('error')!.error).toMatchObject({ code: 'forbidden', details: { reason: 'control_lease_held', holder: 'root:root' } });

    // A client attaching asking for control while the lease is held by someone else only watches.
    const late = await connect(opKey);
    expect(await late.hello()).toMatchObject({ role: 'watcher', leaseHolder: 'root:root' });

    // The holder's client gets input and types.
    const b = await connect(srv.t.rootKey);
    expect(await b.hello()).toMatchObject({ role: 'controller', leaseHolder: 'root:root' });
    b.type('echo from-holder\r');
    await until('holder echo', () => a.text.includes('from-holder'));
    expect(a.text).not.toContain('from-a');

    // The lease ends: every client is told (leaseHolder null); the holder's client keeps input until it leaves.
    a.controls.length = 0;
    await srv.root.control.release(s.id);
    await until('lease end frame', () => a.controls.some((c) => c.type === 'role' && c.leaseHolder === null));
    await until('lease end frame (holder)', () => b.last('role')?.leaseHolder === null);
    expect(b.last('role')!.role).toBe('controller');
    b.ws.close();
    await until('b gone', async () => (await s.terminals.get(termId)).controller === null);
    a.askControl();
    await until('a controls again', () => a.last('role')?.role === 'controller');
    a.type('echo after-lease\r');
    await until('after echo', () => a.text.includes('after-lease'));

    // Lease start and end are audited; the recording marks them around the holder's input.
    const actions = (await op.audit.query({ sessionId: s.id })).map((e) => e.action);
    expect(actions).toEqual(expect.arrayContaining(['control.start', 'control.end']));
    const rec = await s.terminals.recording(termId);
    const events = rec.trim().split('\n').slice(1).map((l) => JSON.parse(l) as [number, string, string]);
    const start = events.findIndex((e) => e[1] === 'm' && e[2].includes('root:root holds input'));
    const end = events.findIndex((e) => e[1] === 'm' && e[2] === 'control lease ended');
    const typed = events.findIndex((e) => e[1] === 'i' && e[2].includes('from-holder'));
    expect(start).toBeGreaterThan(-1);
    expect(start < typed && typed < end).toBe(true);
    expect(events.some((e) => e[1] === 'i' && e[2].includes('from-a'))).toBe(false);
  }, 60_000);

  it('the engine refuses moving input to a non-holder while a lease is held', async () => {
    const a = await connect(opKey, 'watch');
    await srv.root.control.take(s.id);
    await expect(srv.t.engine.terminals.setController(srv.t.root, s.id, termId, (await a.hello()).clientId)).rejects.toMatchObject({
      code: 'forbidden',
      details: { reason: 'control_lease_held' },
    });
    await srv.root.control.release(s.id);
  });
});

describe('a lapsed lease hands input back, and terminals hear of it (fake clock)', () => {
  it('the background sweep ends the lease: role frames with leaseHolder null; the client may ask for input again', async () => {
    const clock = new FakeClock();
    const srv = await startConsoleServer({ clock });
    try {
      const tenant = await srv.root.tenants.create('acme');
      const op = srv.as(tenant.apiKey);
      const s = await op.sessions.create({ objective: 'lapse' });
      const t = await s.terminals.create({ cols: 80, rows: 24, mode: 'watch' });
      t.close();
      const a = new Client(`${srv.url.replace(/^http/, 'ws')}/v1/sessions/${s.id}/terminals/${t.termId}`, tenant.apiKey);
      await a.open;
      expect((await a.hello()).role).toBe('controller');
      await srv.root.control.take(s.id);
      await until('demoted', () => a.last('role')?.leaseHolder === 'root:root');
      clock.advance(10 * 60_000 + 1);
      await srv.t.engine.sweepIdle();
      await until('lease end frame', () => a.last('role')?.leaseHolder === null);
      expect((await op.audit.query({ sessionId: s.id })).find((e) => e.action === 'control.end')?.data).toMatchObject({ reason: 'expired' });
      a.askControl();
      await until('input back', () => a.last('role')?.role === 'controller');
      a.ws.close();
    } finally {
      await srv.close();
    }
  }, 60_000);
});
