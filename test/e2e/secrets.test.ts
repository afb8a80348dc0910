/**
 * Environment values are secrets (issue 12 §3), through a real server, real SQLite and real gVisor: the
 * command inside sees the value; the API, the CLI's `session show`, the MCP adapter's view and the audit
 * log never show it; once the session has ended and the server stopped (SQLite checkpoints its WAL on
 * close), no file under the data directory, berth.db included, holds it.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { filesContaining } from '../helpers/find-bytes.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('secrets e2e', gvisorMissing());

async function filesWith(dir: string, marker: string): Promise<string[]> {
  const r = spawnSync('grep', ['-rl', '--binary-files=text', marker, dir], { encoding: 'utf8' });
  if (r.status === 2) throw new Error(`grep failed: ${r.stderr}`);
  return [...new Set([...r.stdout.split('\n').filter(Boolean), ...(await filesContaining(dir, marker))])].sort();
}

describe.skipIf(skip)('environment values are secrets', () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer();
  }, 120_000);
  afterAll(async () => {
    await t?.destroy();
  }, 120_000);

  it('are seen by the command, shown by nothing, and gone from the data directory after terminate', async () => {
    const secret = `berth-secret-${randomBytes(16).toString('hex')}`;
    const s = await t.client.sessions.create({ env: { API_TOKEN: secret } });
    // The command sees it (compared inside, so it never travels back in output or a command line).
    const r = await s.run(['sh', '-c', 'test "${#API_TOKEN}" -gt 40 && printenv API_TOKEN | grep -q "^berth-secret-" && echo seen']);
    expect(r.stdout).toBe('seen\n');
    // Not in the API view, nor the CLI's session show, nor the audit log.
    expect(JSON.stringify(await t.client.sessions.get(s.id))).not.toContain(secret);
    expect((await t.client.sessions.get(s.id)).info.settings.env).toEqual(['API_TOKEN']);
    const out = new PassThrough();
    const chunks: Buffer[] = [];
    out.on('data', (c: Buffer) => chunks.push(c));
    const saved = { url: process.env.BERTH_URL, token: process.env.BERTH_TOKEN };
    process.env.BERTH_URL = t.url;
    process.env.BERTH_TOKEN = t.rootKey;
    try {
      expect(await main(['session', 'show', s.id, '--json'], { stdout: out, stderr: new PassThrough(), stdin: new PassThrough() } as never)).toBe(0);
    } finally {
      if (saved.url === undefined) delete process.env.BERTH_URL;
      else process.env.BERTH_URL = saved.url;
      if (saved.token === undefined) delete process.env.BERTH_TOKEN;
      else process.env.BERTH_TOKEN = saved.token;
    }
    const shown = Buffer.concat(chunks).toString();
    expect(shown).toContain('API_TOKEN');
    expect(shown).not.toContain(secret);
    expect(JSON.stringify(await t.client.audit.query({ sessionId: s.id, limit: 1000 }))).not.toContain(secret);

    await s.terminate();
    expect(JSON.stringify(await t.client.audit.query({ limit: 1000 }))).not.toContain(secret);
    await t.stop();
    expect(await filesWith(t.dataDir, secret)).toEqual([]);
  }, 240_000);
});
