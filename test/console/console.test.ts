/**
 * The web console in a real browser (Debian's chromium through playwright-core): sign in with a one-time
 * link, watch a session change live, approve a parked call and see the agent's call complete, deny one with
 * a reason the agent receives, take control (the agent's call is refused with human_control) and hand back
 * (the agent's call runs). Screenshots of each page go to docs/console/ (the README shows them).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Berth, Session } from '../../src/sdk/index.js';
import { skipReason } from '../helpers/env.js';
import { SCREENSHOTS, chromiumMissing, launch, startConsoleServer, until, type ConsoleServer } from './browser.js';

const skip = skipReason('console browser tests', chromiumMissing());

const DEPLOY = {
  name: 'ops.deploy',
  description: 'Deploys a build to an environment (irreversible: asks a person first).',
  risk: 'irreversible',
  inputSchema: { type: 'object', additionalProperties: false, required: ['target'], properties: { target: { type: 'string' } } },
  outputSchema: { type: 'object' },
  executor: { kind: 'command', argv: ['cat'] },
};

describe.skipIf(skip)('the web console in a browser', () => {
  let srv: ConsoleServer;
  let op: Berth;
  let browser: Browser;
  let page: Page;
  let s: Session;
  let agent: Berth;

  const shot = async (name: string) => {
    await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: name !== 'audit' });
  };

  beforeAll(async () => {
    await mkdir(SCREENSHOTS, { recursive: true });
    srv = await startConsoleServer();
    const tenant = await srv.root.tenants.create('acme');
    op = srv.as(tenant.apiKey);
    await op.tools.define(DEPLOY);
    s = await op.sessions.create({ objective: 'ship release 1.4 to staging, then prod', metadata: { template: 'deployer' } });
    await op.tools.install(s.id, ['fs.read', 'fs.write', 'shell.exec', 'ops.deploy']);
    await op.plans.set(s.id, {
      objective: 'ship release 1.4',
      steps: [
        { id: 'build', tool: 'shell.exec', arguments: { type: 'object' } },
        { id: 'deploy', tool: 'ops.deploy', arguments: { type: 'object', properties: { target: { enum: ['staging', 'prod'] } } }, repeatable: true },
      ],
    });
    agent = srv.as(s.agentToken as string);
    expect((await agent.tools.call(s.id, 'shell.exec', { command: 'echo built' })).decision).toBe('allow');
    browser = await launch();
    page = await (await browser.newContext({ viewport: { width: 1360, height: 900 } })).newPage();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await srv?.close();
  });

  it('signs in with a one-time link: the code leaves the address bar and the cookie is HttpOnly, SameSite=Strict', async () => {
    const link = await op.console.link();
    expect(link.url).toMatch(/\/#signin=[A-Za-z0-9_-]+$/);
    await page.goto(link.url);
    await page.getByTestId('who').waitFor();
    expect(await page.getByTestId('who').textContent()).toContain('operator:');
    expect(page.url()).not.toContain('signin=');
    const cookies = await page.context().cookies();
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({ name: 'berth_console', httpOnly: true, sameSite: 'Strict' });
    expect(cookies[0]!.value).not.toContain('btk_');
    await page.getByTestId('sessions-table').waitFor();
    await shot('sessions');
  }, 60_000);

  it('watches a session change live (server-sent events), with no reload', async () => {
    const row = page.locator(`tr[data-session="${s.id}"] [data-testid="state"]`);
    await expect.poll(() => row.textContent(), { timeout: 10_000 }).toBe('running');
    await op.sessions.get(s.id).then((x) => x.pause());
    await expect.poll(() => row.textContent(), { timeout: 10_000 }).toBe('paused');
    const created = await op.sessions.create({ objective: 'a second one' });
    await page.locator(`tr[data-session="${created.id}"]`).waitFor({ timeout: 10_000 });
    await op.sessions.get(s.id).then((x) => x.resume());
    await expect.poll(() => row.textContent(), { timeout: 10_000 }).toBe('running');
    await created.terminate();
  }, 60_000);

  it('approves a parked call: the agent’s waiting call completes with its result', async () => {
    const r = await agent.tools.call(s.id, 'ops.deploy', { target: 'staging' }, { step: 'deploy' });
    expect(r.decision).toBe('pending');
    if (r.decision !== 'pending') return;
    await page.goto(`${srv.url}/#/approvals`);
    const card = page.locator(`[data-approval="${r.approvalId}"]`);
    await card.waitFor();
    expect(await card.textContent()).toContain('irreversible');
    expect(await card.textContent()).toContain('matches the step');
    expect(await card.getByTestId('time-left').textContent()).toMatch(/left|no expiry/);
    // No bulk decision for an irreversible call.
    expect(await card.locator('input[type=checkbox]').count()).toBe(0);
    await shot('approvals');
    await card.locator('[data-action=approve]').click();
    const done = await until('the approved call to have run', async () => {
      const a = await agent.approvals.get(s.id, r.approvalId);
      return a.result ? a : undefined;
    });
    expect(done.result).toMatchObject({ decision: 'allow', result: { target: 'staging' } });
    await page.getByTestId('history').getByText('used').waitFor();
  }, 60_000);

  it('denies a parked call with a reason, and the agent receives the reason', async () => {
    const r = await agent.tools.call(s.id, 'ops.deploy', { target: 'prod' }, { step: 'deploy' });
    if (r.decision !== 'pending') throw new Error(`expected pending, got ${r.decision}`);
    const card = page.locator(`[data-approval="${r.approvalId}"]`);
    await card.waitFor({ timeout: 10_000 });
    await card.locator('[data-action=deny]').click();
    await card.locator('input[name=reason]').fill('prod is frozen until Monday');
    await card.locator('[data-action=confirm-deny]').click();
    const a = await until('the denial', async () => {
      const x = await agent.approvals.get(s.id, r.approvalId);
      return x.status === 'denied' ? x : undefined;
    });
    expect(a.result).toMatchObject({ decision: 'deny', code: 'approval_denied' });
    expect((a.result as { reason: string }).reason).toContain('prod is frozen until Monday');
    expect(a.decidedBy).toBe(`operator:${a.tenantId}`);
  }, 60_000);

  it('takes control: the agent’s calls are refused with human_control (retryable); hand back and the next call runs', async () => {
    await page.goto(`${srv.url}/#/sessions/${s.id}`);
    await page.getByTestId('timeline').waitFor();
    await shot('session');
    // From here the agent works without a plan (its deploy steps are done).
    await op.plans.clear(s.id);
    await page.locator('[data-action=take-control]').click();
    await page.getByTestId('control-holder').waitFor();
    expect(await page.getByTestId('control-holder').textContent()).toBe('You have control');
    const lease = await op.control.get(s.id);
    expect(lease).toMatchObject({ held: true });
    expect(lease.holder).toMatch(/^operator:ten_\w+ \(cs_[\w-]{8}\)$/);

    const refused = await agent.tools.call(s.id, 'fs.read', { path: '/work/notes.txt' });
    expect(refused).toMatchObject({ decision: 'deny', stage: 'control', code: 'human_control', retryable: true });
    expect((refused as { reason: string }).reason).toMatch(/wait/i);
    // The refusal shows up in the live timeline.
    await page.getByTestId('timeline').getByText('human_control').first().waitFor({ timeout: 10_000 });
    // Someone else (the same tenant through the API) cannot take it over.
    await expect(op.control.take(s.id)).rejects.toMatchObject({ code: 'conflict' });

    // The lease holder gets the terminal's input and types; a watcher stays read-only (enforced by the server).
    await page.locator('[data-action=open-terminal]').click();
    await expect.poll(() => page.getByTestId('terminal-role').textContent(), { timeout: 15_000 }).toBe('you have the input');
    await page.getByTestId('terminal').click();
    await page.keyboard.type('echo typed-in-console\n');
    await expect.poll(async () => (await page.getByTestId('terminal').textContent()) ?? '', { timeout: 15_000 }).toContain('typed-in-console');
    const termId = (await (await op.sessions.get(s.id)).terminals.list())[0]!.termId;
    const watcher = await (await op.sessions.get(s.id)).terminals.attach(termId, { mode: 'watch' });
    expect(watcher.role).toBe('watcher');
    watcher.write('echo from-a-watcher\n');
    await until('the server to refuse the watcher’s input', () => watcher.errors.length > 0);
    // Not the lease holder (another principal, not this console session): refused by name, and so is asking for input.
    expect(watcher.errors[0]).toMatchObject({ code: 'forbidden', details: { reason: 'control_lease_held', holder: lease.holder } });
    watcher.takeControl();
    await until('the server to refuse the watcher’s request for input', () => watcher.errors.length > 1);
    expect(watcher.errors[1]).toMatchObject({ code: 'forbidden', details: { reason: 'control_lease_held' } });
    expect(watcher.role).toBe('watcher');
    watcher.close();
    await shot('session-control');

    await page.locator('[data-action=hand-back]').click();
    await page.locator('[data-action=take-control]').waitFor();
    expect(await agent.tools.call(s.id, 'fs.write', { path: '/work/notes.txt', content: 'hi' })).toMatchObject({ decision: 'allow' });
    const kinds = (await op.audit.query({ sessionId: s.id })).map((e) => e.action);
    expect(kinds).toEqual(expect.arrayContaining(['control.start', 'control.end']));
  }, 60_000);

  it('audits console actions with who did them, and shows the audit and policy pages', async () => {
    const entries = await op.audit.query();
    const signin = entries.find((e) => e.action === 'console.signin');
    expect(signin).toMatchObject({ principal: { kind: 'operator' }, data: { with: 'link' } });
    const actions = entries.filter((e) => e.action === 'console.action').map((e) => (e.data as { path: string }).path);
    expect(actions).toEqual(expect.arrayContaining([`/v1/sessions/${s.id}/control`]));
    await page.goto(`${srv.url}/#/audit`);
    await page.getByTestId('audit-table').locator('tbody tr').first().waitFor();
    await shot('audit');
    await page.goto(`${srv.url}/#/policy`);
    const text = page.getByTestId('policy-text');
    await text.waitFor();
    await text.fill('permit (principal, action, resource) when { context.nope == 1 ');
    await page.getByTestId('policy-check').getByText('invalid').waitFor();
    expect(await page.locator('[data-action=save-policy]').isDisabled()).toBe(true);
    await shot('policy');
  }, 60_000);

  it("shares a watch-only link from the session page: that one session's page, read-only, with no actions and a terminal to watch; revoked there", async () => {
    // Made in the operator's page: label, lifetime, the URL shown once.
    await page.goto(`${srv.url}/#/sessions/${s.id}`);
    const share = page.getByTestId('share');
    await share.locator('input').first().fill('for the reviewer');
    await share.getByTestId('watch-link-ttl').selectOption('900');
    const t0 = Date.now();
    await share.locator('[data-action=create-watch-link]').click();
    const url = await share.getByTestId('watch-link-url').inputValue();
    expect(url).toMatch(new RegExp(`^${srv.url}/#watch=bwl_[A-Za-z0-9_-]{43}$`));
    const link = (await op.console.watchLinks(s.id)).find((l) => l.label === 'for the reviewer')!;
    expect(link).toMatchObject({ state: 'active', revokedAt: null });
    expect(Math.abs(Date.parse(link.expiresAt) - t0 - 900_000)).toBeLessThan(60_000);
    const row = share.locator(`[data-link=${link.linkId}]`);
    expect(await row.getByTestId('watch-link-state').textContent()).toBe('active');
    await shot('share');
    const viewer = await (await browser.newContext({ viewport: { width: 1360, height: 900 } })).newPage();
    await viewer.goto(url);
    await viewer.getByTestId('who').waitFor();
    expect(await viewer.getByTestId('who').textContent()).toContain(`watch-only view of ${s.id}`);
    expect(viewer.url()).not.toContain('bwl_');
    await viewer.getByTestId('session-state').waitFor();
    await viewer.getByTestId('timeline').locator('tbody tr').first().waitFor();
    await expect.poll(() => viewer.getByTestId('terminal-role').textContent(), { timeout: 15_000 }).toBe('watching (read-only)');
    for (const sel of ['[data-action=take-control]', '[data-action=hand-back]', '[data-action=open-terminal]', 'nav', 'button:has-text("Pause")', 'button:has-text("Snapshot")']) {
      expect([sel, await viewer.locator(sel).count()]).toEqual([sel, 0]);
    }
    // Typing into the watched terminal reaches nothing: the server holds input for nobody.
    await viewer.getByTestId('terminal').click();
    await viewer.keyboard.type('echo from-the-viewer\n');
    expect((await (await op.sessions.get(s.id)).terminals.list())[0]!.controller).toBeNull();
    // Another session is not reachable through it, even by hand.
    const other = await viewer.evaluate(async () => (await fetch('/v1/sessions', { headers: { 'x-berth-csrf': '1' } })).status);
    expect(other).toBe(403);
    await viewer.screenshot({ path: join(SCREENSHOTS, 'watch.png'), fullPage: true });
    // Revoked from the same panel: the open view ends, the link is refused.
    await row.locator('[data-action=revoke-watch-link]').click();
    await expect.poll(() => row.getByTestId('watch-link-state').textContent(), { timeout: 15_000 }).toBe('revoked');
    expect((await op.console.watchLinks(s.id)).find((l) => l.linkId === link.linkId)?.state).toBe('revoked');
    await viewer.reload();
    await viewer.locator('main.signin').waitFor({ timeout: 15_000 });
    await viewer.context().close();
  }, 60_000);
});
