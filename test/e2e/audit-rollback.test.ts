/**
 * A real `berth serve` process whose data directory is put back to an older copy (what restoring a backup,
 * or an intruder hiding entries, does) refuses to start, because the last signed head is remembered beside
 * the audit key, outside the data directory; `--accept-audit-rollback` starts it and the log records that.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SignedHead } from '../../src/core/audit-tree.js';
import { Berth } from '../../src/sdk/index.js';
import { IMAGE_CACHE, REPO } from '../helpers/env.js';

const dataDir = mkdtempSync(join(tmpdir(), 'berth-rollback-data-'));
const keyDir = mkdtempSync(join(tmpdir(), 'berth-rollback-key-'));
const children: ChildProcess[] = [];

beforeAll(() => {
  expect(existsSync(join(REPO, 'dist', 'src', 'cli', 'main.js'))).toBe(true);
}, 300_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(keyDir, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

async function serve(port: number, extra: string[] = []): Promise<Run> {
  const args = [join(REPO, 'bin', 'berth'), 'serve', '--data', dataDir, '--port', String(port), '--image-cache', IMAGE_CACHE, '--audit-key', join(keyDir, 'audit.key'), ...extra];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  child.stdout?.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((done) => child.on('exit', (code) => done(code)));
  return { child, output: () => out, exited };
}

async function listening(r: Run): Promise<void> {
  for (let i = 0; i < 1200; i++) {
    if (r.output().includes('"msg":"ready"')) return; // the server listens first; "ready" follows recovery
    if (r.child.exitCode !== null) throw new Error(`berth serve exited: ${r.output()}`);
    await sleep(100);
  }
  throw new Error(`berth serve did not start: ${r.output()}`);
}

async function stop(r: Run): Promise<void> {
  r.child.kill('SIGTERM');
  expect(await r.exited).toBe(0);
}

const client = (port: number) => new Berth({ url: `http://127.0.0.1:${port}`, token: readFileSync(join(dataDir, 'root.key'), 'utf8').trim() });
const DB_FILES = ['berth.db', 'berth.db.audit-head'];

describe('audit head rollback at start (real server process)', () => {
  it('refuses a data directory behind its last signed head, and --accept-audit-rollback starts it and records it', async () => {
    const port = await freePort();
    const first = await serve(port);
    await listening(first);
    await client(port).tenants.create('before-backup');
    await stop(first);
    expect(existsSync(join(keyDir, 'audit.key.head.json'))).toBe(true);
    for (const f of DB_FILES) copyFileSync(join(dataDir, f), join(keyDir, `backup-${f}`));

    const second = await serve(port);
    await listening(second);
    await client(port).tenants.create('after-backup-1');
    await client(port).tenants.create('after-backup-2');
    await client(port).audit.checkpoint();
    await stop(second);
    // The last head signed anywhere (the ledger beside the key): a clean stop signs the final tree, which
    // includes the request audit's entry for the checkpoint request itself.
    const lastHead = JSON.parse(readFileSync(join(keyDir, 'audit.key.head.json'), 'utf8')) as SignedHead;

    for (const f of DB_FILES) copyFileSync(join(keyDir, `backup-${f}`), join(dataDir, f));
    for (const f of ['berth.db-wal', 'berth.db-shm']) rmSync(join(dataDir, f), { force: true });

    const refused = await serve(port);
    expect(await refused.exited).not.toBe(0);
    expect(refused.output()).toContain('invalid_state');
    expect(refused.output()).toContain('--accept-audit-rollback');
    expect(refused.output()).not.toMatch(/\n\s+at .+:\d+:\d+/); // no stack trace

    const accepted = await serve(port, ['--accept-audit-rollback']);
    await listening(accepted);
    const c = client(port);
    const entries = await c.audit.query({});
    const record = entries.find((e) => e.action === 'audit.rollback_accepted');
    expect(record?.principal.kind).toBe('system');
    expect(record?.data).toMatchObject({ lastSignedHead: { treeSize: lastHead.treeSize } });
    // The accepted log verifies on its own, but not against a head published before the rollback.
    expect(await c.audit.verify()).toMatchObject({ ok: true });
    expect(await c.audit.verify({ checkpoints: [lastHead] })).toMatchObject({ ok: false, tree: { checkpoints: [{ ok: false }] } });
    await stop(accepted);
  }, 300_000);
});
