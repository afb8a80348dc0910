/**
 * A desktop session's live view in the console (issue 11), all real: runsc with the desktop image (Xvfb,
 * openbox, x11vnc), the server's VNC bridge, noVNC in Debian's chromium, and the Tk form the desktop tests
 * ship (test/fixtures/desktop/form.py: every change it sees is written to OUT.live).
 *
 * - An operator and a watch-link viewer both see the screen live.
 * - Neither a watcher's nor a non-holder's clicks do anything: in the page (noVNC is view-only) and on the
 *   server, which drops the input of a raw RFB client that sends it anyway (watcher ticket, operator token
 *   without the lease); the pointer does not move (xdotool) and the form sees nothing.
 * - After "Take control" the operator's clicks and keys land (the form sees them) and the agent's
 *   `computer` actions are refused (human_control); after "Hand back" the page is view-only again and the
 *   agent's calls run: its click submits what the person typed.
 * - After hibernate and wake the page shows the desktop again (x11vnc was checkpointed with the machine).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Browser, Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { desktopViewPaths } from '../../src/protocol/index.js';
import { Berth, type Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { SCREENSHOTS, chromiumMissing, launch, until } from './browser.js';

const skip = skipReason('desktop console test', chromiumMissing() ?? gvisorMissing());

const SCREEN = { width: 1024, height: 768 };
type Point = [number, number];
type Layout = Record<'entry' | 'check' | 'submit', Point>;

/**
 * A bare RFB client over the bridge, as a page that ignores view-only would be: it shakes hands, then sends
 * whatever it is told. sync() asks for a 1x1 update and waits for the answer: x11vnc reads a client's
 * messages in order, so everything sent before has been acted on (or, dropped by Berth, never arrived).
 */
class RawRfb {
  private buf = Buffer.alloc(0);
  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (d: Buffer) => (this.buf = Buffer.concat([this.buf, d])));
  }

  static async open(url: string, headers: Record<string, string> = {}, greetMs = 60_000): Promise<RawRfb> {
    const ws = new WebSocket(url, ['binary'], { headers });
    await new Promise<void>((ok, fail) => (ws.once('open', () => ok()), ws.once('error', fail)));
    const c = new RawRfb(ws);
    try {
      await c.take(12, greetMs); // ProtocolVersion
      ws.send(Buffer.from('RFB 003.008\n'));
      const n = (await c.take(1))[0]!;
      expect([...(await c.take(n))]).toContain(1); // None offered
      ws.send(Buffer.from([1]));
      expect((await c.take(4)).readUInt32BE(0)).toBe(0); // SecurityResult OK
      ws.send(Buffer.from([1])); // ClientInit
      const init = await c.take(24);
      expect([init.readUInt16BE(0), init.readUInt16BE(2)]).toEqual([SCREEN.width, SCREEN.height]);
      await c.take(init.readUInt32BE(20)); // the desktop's name
      return c;
    } catch (e) {
      c.close();
      throw e;
    }
  }

  /**
   * open() as a viewer that reconnects would: a VNC server that stopped greeting is replaced by the
   * desktop's watchdog within about 20 s (a new x11vnc), so a try that hears nothing in 20 s tries again.
   */
  static async openReconnecting(url: string, headers: Record<string, string>, deadlineMs: number): Promise<RawRfb> {
    const end = Date.now() + deadlineMs;
    for (;;) {
      try {
        return await RawRfb.open(url, headers, 20_000);
      } catch (e) {
        if (Date.now() > end) throw e;
      }
    }
  }

  private async take(n: number, timeoutMs = 60_000): Promise<Buffer> {
    await until(`${n} bytes from the VNC server`, () => this.buf.length >= n || this.ws.readyState === this.ws.CLOSED, timeoutMs);
    if (this.buf.length < n) throw new Error(`the VNC connection closed before ${n} bytes came`);
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  click([x, y]: Point): void {
    const at = (mask: number) => Buffer.from([5, mask, x >> 8, x & 0xff, y >> 8, y & 0xff]);
    this.ws.send(Buffer.concat([at(0), at(1), at(0)]));
  }

  key(keysym: number): void {
    const ev = (down: number) => Buffer.from([4, down, 0, 0, (keysym >> 24) & 0xff, (keysym >> 16) & 0xff, (keysym >> 8) & 0xff, keysym & 0xff]);
    this.ws.send(Buffer.concat([ev(1), ev(0)]));
  }

  async sync(): Promise<void> {
    this.buf = Buffer.alloc(0);
    this.ws.send(Buffer.from([3, 0, 0, 0, 0, 0, 0, 1, 0, 1]));
    await until('a framebuffer update', () => this.buf.length > 0 && this.buf[0] === 0, 60_000);
  }

  close(): void {
    this.ws.close();
  }
}

describe.skipIf(skip)('the desktop view in the console (real runsc, real x11vnc, noVNC in chromium)', () => {
  let srv: TestServer;
  let op: Berth;
  let opKey: string;
  let agent: Berth;
  let s: Session;
  let layout: Layout;
  let browser: Browser;
  let opPage: Page;
  let watchPage: Page;
  let watchCookie: string;

  const live = async (): Promise<{ name: string; agree: boolean } | null> => {
    const r = await s.run(['sh', '-c', 'cat /root/out.json.live 2>/dev/null || true']);
    return r.stdout.trim() ? (JSON.parse(r.stdout) as { name: string; agree: boolean }) : null;
  };
  const pointer = async (): Promise<Point> => {
    const r = await s.run(['xdotool', 'getmouselocation', '--shell']);
    const v = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split('=') as [string, string]));
    return [Number(v.X), Number(v.Y)];
  };
  const canvasOf = (page: Page): Locator => page.getByTestId('desktop').locator('canvas');
  /** Clicks the page's view of the desktop at a point of the desktop's own screen. */
  const clickAt = async (page: Page, [x, y]: Point) => {
    const canvas = canvasOf(page);
    await canvas.scrollIntoViewIfNeeded();
    const box = (await canvas.boundingBox())!;
    // The middle of the desktop pixel, so the page's scaling rounds back to it.
    await canvas.click({ position: { x: ((x + 0.5) * box.width) / SCREEN.width, y: ((y + 0.5) * box.height) / SCREEN.height } });
  };
  const mode = (page: Page) => page.getByTestId('desktop-mode');
  /** Waits for the page's desktop view to say `want` (connected); a timeout says what it said instead. */
  const waitMode = async (page: Page, want: string) => {
    let last: string | null = null;
    await until(`the desktop view to say "${want}"`, async () => (last = await mode(page).textContent()) === want, 30_000).catch((e: Error) => {
      throw new Error(`${e.message}; it says "${last}"`);
    });
  };
  const connected = async (page: Page) => {
    await page.locator('[data-testid=desktop-mode][data-status=connected]').waitFor({ timeout: 30_000 });
    // The canvas is the desktop's screen, drawn at its own size (and scaled to the page).
    await until('the framebuffer', async () => (await canvasOf(page).evaluate((c: HTMLCanvasElement) => [c.width, c.height])).join('x') === `${SCREEN.width}x${SCREEN.height}`);
  };
  const vncUrl = (ticket?: string) => `${srv.url.replace(/^http/, 'ws')}${desktopViewPaths(s.id).vnc}${ticket ? `?ticket=${ticket}` : ''}`;
  const watcherTicket = async (): Promise<string> => {
    const res = await fetch(`${srv.url}${desktopViewPaths(s.id).tickets}`, { method: 'POST', headers: { cookie: watchCookie, 'x-berth-csrf': '1' } });
    expect(res.status).toBe(201);
    return ((await res.json()) as { ticket: string }).ticket;
  };

  beforeAll(async () => {
    srv = await startTestServer();
    opKey = (await srv.client.tenants.create('acme')).apiKey;
    op = new Berth({ url: srv.url, token: opKey });
    s = await op.sessions.create({ objective: 'fill the form', desktop: SCREEN, memoryMb: 512 });
    agent = new Berth({ url: srv.url, token: s.agentToken as string });
    await s.files.write('/root/form.py', await readFile(join(REPO, 'test/fixtures/desktop/form.py')));
    await s.exec(['python3', '/root/form.py', '/root/out.json', '/root/layout.json'], { background: true });
    await until('the form on screen', async () => (await s.run(['test', '-f', '/root/layout.json'])).code === 0, 60_000);
    layout = JSON.parse((await s.run(['cat', '/root/layout.json'])).stdout) as Layout;

    browser = await launch();
    opPage = await (await browser.newContext({ viewport: { width: 1360, height: 1000 } })).newPage();
    await opPage.goto((await op.console.link()).url);
    await opPage.getByTestId('who').waitFor();
    await opPage.goto(`${srv.url}/#/sessions/${s.id}`);

    const link = await op.console.createWatchLink(s.id, { label: 'desktop viewer' });
    const watchCtx = await browser.newContext({ viewport: { width: 1360, height: 1000 } });
    watchPage = await watchCtx.newPage();
    await watchPage.goto(link.url);
    await watchPage.getByTestId('session-state').waitFor({ timeout: 30_000 });
    watchCookie = (await watchCtx.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await srv?.destroy();
  });

  it('the operator and a watch-link viewer both see the desktop live, view-only while the agent has control', async () => {
    await connected(opPage);
    await connected(watchPage);
    await waitMode(opPage, 'view only');
    await waitMode(watchPage, 'view only');
    await opPage.getByTestId('desktop').screenshot({ path: join(SCREENSHOTS, 'desktop.png') });
  }, 120_000);

  it("a watcher's clicks and keys do nothing, in the page and on the server", async () => {
    const before = await pointer();
    expect(before).not.toEqual(layout.check);
    await clickAt(watchPage, layout.check);
    await clickAt(watchPage, layout.entry);
    await watchPage.keyboard.type('watcher');
    await clickAt(opPage, layout.check); // the operator without the lease: view-only too
    // A client that ignores view-only: the server drops its input (x11vnc never sees it).
    const raw = await RawRfb.open(vncUrl(await watcherTicket()));
    try {
      raw.click(layout.check);
      raw.click(layout.entry);
      raw.key(0x77); // 'w'
      await raw.sync();
    } finally {
      raw.close();
    }
    const bare = await RawRfb.open(vncUrl(), { authorization: `Bearer ${opKey}` });
    try {
      bare.click(layout.check);
      await bare.sync();
    } finally {
      bare.close();
    }
    await sleep(500); // what the pages sent (nothing) has long arrived by now
    expect(await pointer()).toEqual(before);
    expect(await live()).toBeNull(); // the form saw no change at all
  }, 120_000);

  it('after Take control the operator clicks and types into the form, and the agent waits', async () => {
    await opPage.locator('[data-action=take-control]').click();
    await waitMode(opPage, 'you have control');
    await clickAt(opPage, layout.check);
    await until('the box ticked', async () => (await live())?.agree === true);
    const [px, py] = await pointer();
    expect(Math.abs(px - layout.check[0]) <= 1 && Math.abs(py - layout.check[1]) <= 1, `pointer at ${px},${py}, box at ${layout.check}`).toBe(true);
    await clickAt(opPage, layout.entry);
    // Tk moves its focus to the field only once it has read the click: keys sent sooner go to the box.
    await sleep(1000);
    await opPage.keyboard.type('Grace');
    await until('the name typed', async () => (await live())?.name === 'Grace');
    // The watcher still cannot act, even now.
    const raw = await RawRfb.open(vncUrl(await watcherTicket()));
    try {
      raw.key(0x78); // 'x'
      await raw.sync();
    } finally {
      raw.close();
    }
    expect(await live()).toEqual({ name: 'Grace', agree: true });
    await waitMode(watchPage, 'view only');
    const refused = await agent.tools.call(s.id, 'computer', { action: 'left_click', coordinate: layout.submit });
    expect(refused).toMatchObject({ decision: 'deny', code: 'human_control' });
    await opPage.getByTestId('desktop').screenshot({ path: join(SCREENSHOTS, 'desktop-control.png') });
  }, 120_000);

  it("after Hand back the page is view-only again and the agent's calls run", async () => {
    await opPage.locator('[data-action=hand-back]').click();
    await waitMode(opPage, 'view only');
    expect((await op.control.get(s.id)).held).toBe(false);
    const here = await pointer();
    await clickAt(opPage, layout.submit);
    await sleep(500);
    expect(await pointer()).toEqual(here);
    const r = await agent.tools.call(s.id, 'computer', { action: 'left_click', coordinate: layout.submit, screenshot: false });
    expect(r.decision).toBe('allow');
    await until('the form submitted', async () => (await s.run(['test', '-f', '/root/out.json'])).code === 0);
    expect(JSON.parse((await s.run(['cat', '/root/out.json'])).stdout)).toEqual({ name: 'Grace', agree: true });
    // Every view was a port connection of its own, audited with via 'desktop'.
    const opens = (await op.audit.query({ sessionId: s.id, limit: 1000 })).filter((e) => e.action === 'session.port.open');
    expect(opens.filter((e) => (e.data as { via?: string }).via === 'desktop').length).toBeGreaterThanOrEqual(5);
  }, 120_000);

  it('after hibernate and wake the view comes back: the VNC server is restored with the machine', async () => {
    await s.hibernate();
    await until('the page to show it hibernated', async () => (await opPage.getByTestId('session-state').textContent()) === 'hibernated');
    expect(await opPage.getByTestId('desktop').count()).toBe(0);
    await s.wake();
    await connected(opPage);
    await waitMode(opPage, 'view only');
    const raw = await RawRfb.openReconnecting(vncUrl(), { authorization: `Bearer ${opKey}` }, 90_000);
    try {
      await raw.sync();
    } finally {
      raw.close();
    }
  }, 180_000);
});
