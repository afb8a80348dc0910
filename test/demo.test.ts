/**
 * `berth demo` as a user runs it (bin/berth, compiled CLI) against a real server with gVisor sessions:
 * exit 0 means every expectation of the Plan-then-Execute scenario held; the transcript shows each one.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, gvisorMissing, skipReason } from './helpers/env.js';
import { startTestServer, type TestServer } from './helpers/server.js';

const skip = skipReason('demo e2e', gvisorMissing());

function berth(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(REPO, 'bin', 'berth'), ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe.skipIf(skip)('berth demo', () => {
  let srv: TestServer;

  beforeAll(async () => {
    srv = await startTestServer();
  }, 300_000);
  afterAll(async () => {
    await srv?.destroy();
  });

  it('runs the scenario end to end and exits 0', async () => {
    const r = await berth(['demo'], { BERTH_URL: srv.url, BERTH_TOKEN: srv.rootKey });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    const out = r.stdout;
    expect(out).toMatch(/\[agent\]\s+fs\.read \/work\/inbox\/q3-report\.md → \d+ characters/);
    expect(out).toMatch(/\[agent\]\s+shell\.exec → denied at stage plan \(off_plan\)/);
    expect(out).toMatch(/\[agent\]\s+report\.publish → pending approval apr_/);
    expect(out).toMatch(/\[operator\]\s+approved apr_\w+: the call ran → used/);
    expect(out).toMatch(/\[operator\]\s+audit verify → ok/);
    expect(out.match(/^\[berth\]\s+OK /gm)).toHaveLength(6);
    expect(out).toContain('demo: every expectation held');
    // The demo cleans up after itself.
    expect((await srv.client.sessions.list({ states: ['running'] })).length).toBe(0);
  }, 180_000);

  it('refuses an operator key up front (audit verify is root-only), before creating anything', async () => {
    const { apiKey } = await srv.client.tenants.create('demo-operator');
    const before = (await srv.client.sessions.list()).length;
    const r = await berth(['demo'], { BERTH_URL: srv.url, BERTH_TOKEN: apiKey });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: forbidden: .*root key/m);
    expect((await srv.client.sessions.list()).length).toBe(before);
  });

  it('--json reports each expectation', async () => {
    const r = await berth(['demo', '--json'], { BERTH_URL: srv.url, BERTH_TOKEN: srv.rootKey });
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout) as { ok: boolean; expectations: Array<{ id: string; held: boolean }> };
    expect(j.ok).toBe(true);
    expect(j.expectations.map((e) => e.id)).toEqual(['read', 'injection-refused', 'summary', 'pending', 'published', 'audit']);
  }, 180_000);
});
