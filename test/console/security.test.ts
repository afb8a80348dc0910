/**
 * What the console must refuse: expired and reused sign-in links, a forged cookie, an idle session,
 * state-changing requests without the CSRF header or from another origin (over HTTP, and a real cross-site
 * form POST in chromium), an agent token at the sign-in form. Time is a fake clock where it is the subject.
 * And the first page's time to interactive with 50 sessions and 500 audit entries, measured in the browser.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Berth } from '../../src/sdk/index.js';
import { FakeClock } from '../gate/harness.js';
import { skipReason } from '../helpers/env.js';
import { SCREENSHOTS, chromiumMissing, launch, startConsoleServer, until, type ConsoleServer } from './browser.js';

const IDLE_MS = 15 * 60_000;

describe('console sign-in and cross-site protection (HTTP)', () => {
  const clock = new FakeClock();
  let srv: ConsoleServer;
  let op: Berth;

  const signIn = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${srv.url}/console/signin`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-berth-csrf': '1', ...headers }, body: JSON.stringify(body) });
  const codeOf = async () => (await op.console.link()).url.split('#signin=')[1] as string;
  const cookieOf = (res: Response) => (res.headers.get('set-cookie') ?? '').split(';')[0] as string;
  const me = (cookie: string, headers: Record<string, string> = {}) => fetch(`${srv.url}/v1/console/me`, { headers: { cookie, ...headers } });
  const errCode = async (res: Response) => ((await res.json()) as { error: { code: string } }).error.code;

  beforeAll(async () => {
    srv = await startConsoleServer({ clock });
    op = srv.as((await srv.root.tenants.create('acme')).apiKey);
  });
  afterAll(async () => srv?.close());

  it('a link signs in once; a reused or expired link is refused', async () => {
    const code = await codeOf();
    const first = await signIn({ code });
    expect(first.status).toBe(200);
    expect(first.headers.get('set-cookie')).toMatch(/^berth_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict$/);
    const again = await signIn({ code });
    expect([again.status, await errCode(again)]).toEqual([401, 'unauthenticated']);
    const late = await codeOf();
    clock.advance(60_001);
    const expired = await signIn({ code: late });
    expect([expired.status, await errCode(expired)]).toEqual([401, 'unauthenticated']);
  });

  it('a forged cookie is refused, and the cookie is never the token', async () => {
    const forged = await me('berth_console=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA');
    expect([forged.status, await errCode(forged)]).toEqual([401, 'unauthenticated']);
    const tokenAsCookie = await me(`berth_console=${srv.t.rootKey}`);
    expect(tokenAsCookie.status).toBe(401);
    const ok = await signIn({ token: srv.t.rootKey });
    expect(cookieOf(ok)).not.toContain(srv.t.rootKey);
  });

  it('an agent token cannot sign in to the console', async () => {
    const s = await op.sessions.create();
    const res = await signIn({ token: s.agentToken });
    expect([res.status, await errCode(res)]).toEqual([403, 'forbidden']);
    await s.terminate();
  });

  it('logs off after idle time; the person’s requests keep it alive, the console’s background refreshes do not', async () => {
    const cookie = cookieOf(await signIn({ code: await codeOf() }));
    clock.advance(IDLE_MS - 60_000);
    expect((await me(cookie)).status).toBe(200); // activity
    clock.advance(IDLE_MS - 60_000);
    expect((await me(cookie, { 'x-berth-background': '1' })).status).toBe(200); // not activity
    clock.advance(60_001);
    const gone = await me(cookie);
    expect(gone.status).toBe(401);
    expect(((await gone.json()) as { error: { details: { reason: string } } }).error.details.reason).toBe('idle');
    expect((await me(cookie)).status).toBe(401);
    expect((await op.audit.query()).some((e) => e.action === 'console.logoff' && (e.data as { reason: string }).reason === 'idle')).toBe(true);
  });

  it('sign-out ends the console session', async () => {
    const cookie = cookieOf(await signIn({ code: await codeOf() }));
    const out = await fetch(`${srv.url}/v1/console/signout`, { method: 'POST', headers: { cookie, 'x-berth-csrf': '1' } });
    expect(out.status).toBe(200);
    expect((await me(cookie)).status).toBe(401);
  });

  it('refuses a state-changing cookie request without the CSRF header, from another Origin, or marked cross-site', async () => {
    const cookie = cookieOf(await signIn({ code: await codeOf() }));
    const s = await op.sessions.create();
    const pause = (headers: Record<string, string>) => fetch(`${srv.url}/v1/sessions/${s.id}/pause`, { method: 'POST', headers: { cookie, ...headers } });
    const variants: Record<string, string>[] = [{}, { 'x-berth-csrf': '1', origin: 'http://evil.example' }, { 'x-berth-csrf': '1', 'sec-fetch-site': 'cross-site' }];
    for (const h of variants) {
      const res = await pause(h);
      expect([res.status, await errCode(res)]).toEqual([403, 'forbidden']);
    }
    expect((await op.sessions.get(s.id)).state).toBe('running');
    const evilSignIn = await signIn({ code: await codeOf() }, { origin: 'http://evil.example' });
    expect(evilSignIn.status).toBe(403);
    const ok = await pause({ 'x-berth-csrf': '1', origin: srv.url });
    expect(ok.status).toBe(200);
    expect((await op.sessions.get(s.id)).state).toBe('paused');
    await s.terminate();
  });
});

const skip = skipReason('console browser tests', chromiumMissing());

describe.skipIf(skip)('the console in a browser: cross-site POST and first-page time', () => {
  let srv: ConsoleServer;
  let op: Berth;
  let evil: Server;

  beforeAll(async () => {
    srv = await startConsoleServer();
    const acme = await srv.root.tenants.create('acme');
    // 50 sessions of 512 MiB may exceed the default memory quota (the host's memory); the memory driver uses none.
    await srv.root.tenants.setQuotas(acme.id, { maxMemoryMb: 1_000_000 });
    op = srv.as(acme.apiKey);
  }, 60_000);
  afterAll(async () => {
    evil?.close();
    await srv?.close();
  });

  it('a form on another site cannot make a signed-in browser change anything', async () => {
    const s = await op.sessions.create();
    // Another origin (localhost vs 127.0.0.1, another port): a page that posts a form to Berth on load.
    const target = `${srv.url}/v1/sessions/${s.id}/pause`;
    evil = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<form id=f method=POST action="${target}" enctype="text/plain"><input name='{"a":"' value='"}'></form><script>document.getElementById('f').submit()</script>`);
    });
    await new Promise<void>((r) => evil.listen(0, 'localhost', r));
    const evilUrl = `http://localhost:${(evil.address() as AddressInfo).port}/`;
    const browser = await launch();
    try {
      const page = await browser.newPage();
      await page.goto((await op.console.link()).url);
      await page.getByTestId('who').waitFor();
      const answered = page.waitForResponse((r) => r.url() === target);
      await page.goto(evilUrl);
      const res = await answered;
      expect(res.status()).toBe(401); // SameSite=Strict: the cookie did not even go along
      expect((await op.sessions.get(s.id)).state).toBe('running');
    } finally {
      await browser.close();
      await s.terminate();
    }
  }, 60_000);

  it('the first page is interactive quickly with 50 sessions and 500 audit entries', async () => {
    const sessions = [];
    for (let i = 0; i < 50; i++) sessions.push(await op.sessions.create({ objective: `load ${i}`, metadata: { template: i % 2 ? 'python' : 'node' } }));
    for (let i = 0; (await op.audit.query({ afterSeq: 0, limit: 1000 })).length < 500; i++) {
      const s = sessions[i % 50]!;
      await srv.as(s.agentToken as string).tools.call(s.id, 'fs.read', { path: `/work/f${i}.txt` });
    }
    const entries = (await op.audit.query({ limit: 1000 })).length;
    expect(entries).toBeGreaterThanOrEqual(500);
    const browser = await launch();
    try {
      const page = await browser.newPage();
      await page.goto((await op.console.link()).url);
      await page.getByTestId('who').waitFor();
      const times: number[] = [];
      for (let run = 0; run < 3; run++) {
        await page.goto('about:blank');
        const t0 = Date.now();
        await page.goto(`${srv.url}/#/sessions`);
        await page.locator('tr[data-session]').nth(49).waitFor();
        // Interactive: the filter answers input.
        await page.getByTestId('session-filter').fill('load 7');
        await until('the filter to apply', async () => (await page.locator('tr[data-session]').count()) === 1);
        times.push(Date.now() - t0);
        await page.getByTestId('session-filter').fill('');
      }
      const t0 = Date.now();
      await page.goto(`${srv.url}/#/audit`);
      await page.getByTestId('audit-table').locator('tbody tr').nth(499).waitFor();
      const audit = Date.now() - t0;
      const best = Math.min(...times);
      const median = [...times].sort((a, b) => a - b)[1] as number;
      const report = { sessions: 50, auditEntries: entries, sessionsPageMs: { runs: times, best, median }, auditPageMs: audit, measuredAt: new Date().toISOString() };
      console.log(`[console] first page interactive: ${JSON.stringify(report)}`);
      await writeFile(join(SCREENSHOTS, 'first-page.json'), `${JSON.stringify(report, null, 2)}\n`);
      // The target is 1 s on this machine; the bound here is looser so a loaded CI host does not flake.
      expect(median).toBeLessThan(3000);
    } finally {
      await browser.close();
    }
  }, 300_000);
});
