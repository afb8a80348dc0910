/**
 * The review's attacks on the audit log, done as someone with write access to the data directory (but not
 * to the audit key, kept in another directory) would: a second SQLite connection that drops the guards and
 * rewrites rows, and the project's own hash and tree functions to make the forgery look whole. Each one must
 * make `berth audit verify --checkpoint head.json` (the compiled CLI, against a live server) fail, naming
 * the first entry that differs where it can, and the untouched log must pass. The attacks that leave the
 * stored tree or its signed head behind must also stop the server from starting again.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { entryLeafText, hashEntry, partsOfRow, systemClock, type AuditEntry, type Principal } from '../../src/core/index.js';
import { MerkleFrontier } from '../../src/core/merkle.js';
import { MemoryDriver } from '../../src/drivers/memory/driver.js';
import { newSecret } from '../../src/engine/auth.js';
import { createApp } from '../../src/server/app.js';
import { composeEngine, type Berth as ServerSide } from '../../src/server/compose.js';
import { startServer, type RunningServer } from '../../src/server/serve.js';
import { openSqliteStore } from '../../src/store/sqlite.js';
import { LocalSnapshotStore } from '../../src/store/snapshot-dir.js';
import { REPO } from '../helpers/env.js';

const MAIN = join(REPO, 'dist', 'src', 'cli', 'main.js');

beforeAll(() => {
  expect(existsSync(MAIN), 'tsc did not emit the CLI').toBe(true);
}, 300_000);

interface Live {
  dataDir: string;
  keyDir: string;
  dbPath: string;
  rootKey: string;
  side: ServerSide;
  http: RunningServer;
  root: Principal;
  stop(): Promise<void>;
}

const dirs: string[] = [];
/**
 * Everything that held statements stays reachable until the worker exits: better-sqlite3 12 on Node 24 can
 * abort the process when V8 finalizes a Statement from a GC inside a microtask checkpoint
 * (`Assertion failed: (env) != nullptr`).
 */
const retained: unknown[] = [];
const running: Live[] = [];
afterEach(async () => {
  for (const l of running.splice(0)) await l.stop().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
afterAll(async () => {
  for (const l of running.splice(0)) await l.stop().catch(() => undefined);
});

async function start(o: { dataDir?: string; keyDir?: string; rootKey?: string } = {}): Promise<Live> {
  const dataDir = o.dataDir ?? mkdtempSync(join(tmpdir(), 'berth-tamper-data-'));
  const keyDir = o.keyDir ?? mkdtempSync(join(tmpdir(), 'berth-tamper-key-'));
  if (!o.dataDir) dirs.push(dataDir, keyDir);
  const dbPath = join(dataDir, 'berth.db');
  const rootKey = o.rootKey ?? newSecret('btr');
  const store = openSqliteStore({ path: dbPath, clock: systemClock });
  retained.push(store);
  const driver = new MemoryDriver({});
  const side = await composeEngine({
    dataDir, store, snapshots: new LocalSnapshotStore(join(dataDir, 'snapshots')), drivers: { [driver.name]: driver },
    rootKey, clock: systemClock, idleSweepMs: 0, auditKeyPath: join(keyDir, 'audit.key'),
  });
  const http = await startServer({ app: createApp({ engine: side.engine }), host: '127.0.0.1', port: 0, graceMs: 200 });
  let stopped = false;
  const live: Live = {
    dataDir, keyDir, dbPath, rootKey, side, http, root: await side.engine.authenticate(rootKey),
    async stop() {
      if (stopped) return;
      stopped = true;
      await http.close();
      await side.close();
    },
  };
  running.push(live);
  return live;
}

function berth(l: Live, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [MAIN, ...args], { env: { ...process.env, BERTH_URL: l.http.url, BERTH_TOKEN: l.rootKey }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((done, fail) => {
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}

/** A log with a few kinds of entries, a checkpoint published outside the data directory, and a verified start. */
async function fixture(): Promise<{ l: Live; head: string; n: number }> {
  const l = await start();
  for (let i = 0; i < 4; i++) await l.side.engine.createTenant(l.root, `t${i}`);
  await l.side.engine.createSession(l.root, { objective: 'tamper test' });
  await l.side.engine.createTenant(l.root, 'last');
  const cp = await berth(l, ['audit', 'checkpoint']);
  expect(cp.code, cp.stderr).toBe(0);
  const head = join(l.keyDir, 'head.json');
  writeFileSync(head, cp.stdout);
  const n = JSON.parse(cp.stdout).treeSize as number;
  expect(n).toBeGreaterThan(6);
  const ok = await berth(l, ['audit', 'verify', '--checkpoint', head]);
  expect(ok.code, ok.stderr).toBe(0);
  // The checkpoint request itself is recorded after the head was signed (the request audit), so the log
  // may have grown past n; what matters is that it extends the published head.
  const entries = Number(/ok: (\d+) entries/.exec(ok.stdout)?.[1]);
  expect(entries, ok.stdout).toBeGreaterThanOrEqual(n);
  expect(ok.stdout).toContain('1 checkpoint(s) consistent');
  return { l, head, n };
}

/** The attacker's connection: guards dropped. */
function raw(l: Live): Database.Database {
  const db = new Database(l.dbPath);
  retained.push(db);
  for (const t of ['audit_no_update', 'audit_no_delete', 'audit_seq_next', 'audit_tree_no_update', 'audit_tree_no_delete', 'audit_tree_no_replace']) db.exec(`DROP TRIGGER IF EXISTS ${t}`);
  return db;
}

type Row = Parameters<typeof partsOfRow>[0] & { seq: number; hash: string; prev_hash: string; data: string; principal: string };
const rows = (db: Database.Database) => db.prepare('SELECT * FROM audit ORDER BY seq').all() as Row[];

const decode = (r: Row): Omit<AuditEntry, 'hash'> => ({
  seq: r.seq, ts: r.ts as number, tenantId: r.tenant_id as string | null, sessionId: r.session_id as string | null,
  principal: JSON.parse(r.principal), action: r.action as string, outcome: r.outcome as string, data: JSON.parse(r.data), prevHash: r.prev_hash,
});

/** What a careful attacker does after editing rows: recompute the whole tree table with the project's code. */
function rebuildTree(db: Database.Database): void {
  db.exec('DELETE FROM audit_tree');
  const f = MerkleFrontier.empty();
  const ins = db.prepare('INSERT INTO audit_tree (level, idx, hash) VALUES (?, ?, ?)');
  for (const r of rows(db)) for (const n of f.append(Buffer.from(entryLeafText(partsOfRow(r))))) ins.run(n.level, n.index, n.hash);
}

/** Rewrites every hash from `from` on, so the chain verifies again. */
function rechain(db: Database.Database, from: number): void {
  let prev = from === 1 ? '0'.repeat(64) : (db.prepare('SELECT hash FROM audit WHERE seq = ?').get(from - 1) as { hash: string }).hash;
  for (const r of rows(db).filter((x) => x.seq >= from)) {
    const hash = hashEntry({ ...decode(r), prevHash: prev });
    db.prepare('UPDATE audit SET prev_hash = ?, hash = ? WHERE seq = ?').run(prev, hash, r.seq);
    prev = hash;
  }
}

/** `where`: whose verdict names the problem: the published head's, or the head signed with the newest append. */
async function expectFails(l: Live, head: string, problem: string, firstBadSeq?: number, where: 'checkpoint' | 'latest' = 'checkpoint'): Promise<void> {
  const r = await berth(l, ['audit', 'verify', '--checkpoint', head, '--json']);
  expect(r.code, r.stdout).toBe(1);
  const v = JSON.parse(r.stdout);
  expect(v.ok).toBe(false);
  // The published head's own verdict (the chain and its anchor may have failed first, and said so).
  const cp = where === 'checkpoint' ? v.tree.checkpoints[0] : v.tree.latestSigned;
  expect(cp).toMatchObject({ ok: false, problem });
  if (firstBadSeq !== undefined) expect(cp.firstBadSeq).toBe(firstBadSeq);
  expect(r.stderr).toMatch(/fails verification/);
}

async function expectRestartRefused(l: Live): Promise<void> {
  await l.stop();
  const again = start({ dataDir: l.dataDir, keyDir: l.keyDir, rootKey: l.rootKey });
  await expect(again).rejects.toMatchObject({ code: 'invalid_state' });
}

describe('audit verify --checkpoint against an attacker with the data directory', () => {
  it('passes untouched, and the server restarts cleanly', async () => {
    const { l, head, n } = await fixture();
    await l.stop();
    const l2 = await start({ dataDir: l.dataDir, keyDir: l.keyDir, rootKey: l.rootKey });
    const r = await berth(l2, ['audit', 'verify', '--checkpoint', head, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const v = JSON.parse(r.stdout);
    // Recovery after the restart may append (the memory driver's machine did not survive it).
    expect(v).toMatchObject({ ok: true, tree: { latestSigned: { ok: true }, checkpoints: [{ ok: true, treeSize: n }] } });
    expect(v.entries).toBeGreaterThanOrEqual(n);
  });

  it('fails: table wiped and the anchor deleted', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    db.exec('DELETE FROM audit; DELETE FROM audit_tree; DELETE FROM audit_signed_head;');
    db.close();
    unlinkSync(`${l.dbPath}.audit-head`);
    await expectFails(l, head, 'truncated', 1);
    await expectRestartRefused(l);
  });

  it('fails: tail cut, tree rebuilt and the anchor rewritten with an old (seq, hash)', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    db.exec('DELETE FROM audit WHERE seq > 3');
    rebuildTree(db);
    const h3 = (db.prepare('SELECT hash FROM audit WHERE seq = 3').get() as { hash: string }).hash;
    db.close();
    writeFileSync(`${l.dbPath}.audit-head`, `{"seq":3,"hash":"${h3}"}\n`);
    await expectFails(l, head, 'truncated', 4);
    await expectRestartRefused(l);
  });

  it('fails: an entry edited and every later hash recomputed with the project\'s hash function (tree left alone: names the entry)', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    db.prepare("UPDATE audit SET outcome = 'deny' WHERE seq = 2").run();
    rechain(db, 2);
    db.close();
    await expectFails(l, head, 'rewritten', 2);
  });

  it('fails: the same, with the tree table recomputed too', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    db.prepare("UPDATE audit SET outcome = 'deny' WHERE seq = 2").run();
    rechain(db, 2);
    rebuildTree(db);
    db.close();
    await expectFails(l, head, 'rewritten');
    await expectRestartRefused(l);
  });

  it('fails: a forged row appended with a valid chain hash and its tree leaf', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    const last = rows(db).at(-1)!;
    const n = last.seq as number; // the log may have grown past the published head (the request audit)
    const forged = { ...decode(last), seq: n + 1, ts: (last.ts as number) + 1, action: 'session.exec', data: { argv: ['true'] }, prevHash: last.hash };
    db.prepare('INSERT INTO audit (seq, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').run(
      forged.seq, forged.ts, forged.tenantId, forged.sessionId, last.principal, forged.action, forged.outcome, JSON.stringify(forged.data), forged.prevHash, hashEntry(forged),
    );
    rebuildTree(db);
    db.close();
    const chainOnly = await l.side.engine.auditVerify(l.root);
    expect(chainOnly.ok).toBe(true); // the chain alone cannot tell
    // The published head is a true prefix; what gives the forgery away is that no signature covers it.
    await expectFails(l, head, 'unsigned', n + 1, 'latest');
    expect(await berth(l, ['audit', 'verify'])).toMatchObject({ code: 1, stderr: expect.stringContaining(`at seq ${n + 1} (unsigned)`) });
    await expectRestartRefused(l);
  });

  it('fails: a stored entry given a duplicated JSON key (it parses to the same entry, so the chain still verifies)', async () => {
    const { l, head } = await fixture();
    const db = raw(l);
    const r = rows(db).find((x) => x.action === 'session.create')!;
    const dup = `{"objective":"rm -rf /",${r.data.slice(1)}`; // JSON.parse keeps the later "objective"
    expect(JSON.parse(dup)).toEqual(JSON.parse(r.data));
    db.prepare('UPDATE audit SET data = ? WHERE seq = ?').run(dup, r.seq);
    db.close();
    expect((await l.side.engine.auditVerify(l.root)).ok).toBe(true);
    await expectFails(l, head, 'rewritten', r.seq);
  });

  it('fails: a head not signed by this log\'s key', async () => {
    const { l, head } = await fixture();
    const other = await start();
    const cp = await berth(other, ['audit', 'checkpoint']);
    const forged = { ...JSON.parse(cp.stdout), treeSize: 1 };
    const file = join(l.keyDir, 'forged.json');
    writeFileSync(file, JSON.stringify(forged));
    const r = await berth(l, ['audit', 'verify', '--checkpoint', head, '--checkpoint', file, '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: false, problem: 'signature', firstBadSeq: null });
  });

  it('berth audit prove: the standalone script checks the proof with the public key alone, and rejects an altered one', async () => {
    const { l } = await fixture();
    const pub = join(l.keyDir, 'audit.pub');
    const k = await berth(l, ['audit', 'key']);
    expect(k.code, k.stderr).toBe(0);
    writeFileSync(pub, k.stdout);
    const script = (file: string) => spawnSync(process.execPath, [join(REPO, 'scripts', 'verify-audit-proof.mjs'), file, pub], { encoding: 'utf8' });
    for (const seq of [1, 3, 5]) {
      const p = await berth(l, ['audit', 'prove', String(seq)]);
      expect(p.code, p.stderr).toBe(0);
      const file = join(l.keyDir, `proof-${seq}.json`);
      writeFileSync(file, p.stdout);
      const ok = script(file);
      expect(ok.status, ok.stderr).toBe(0);
      expect(ok.stdout).toContain(`ok: entry ${seq} `);
      const doc = JSON.parse(p.stdout);
      const variants = [
        { ...doc, entry: doc.entry.replace('"outcome":"ok"', '"outcome":"deny"') },
        { ...doc, entry: `{"action":"x",${doc.entry.slice(1)}` }, // a duplicated key
        { ...doc, head: { ...doc.head, treeSize: doc.head.treeSize + 1 } },
        { ...doc, proof: doc.proof.slice(1) },
      ];
      for (const [i, v] of variants.entries()) {
        const bad = join(l.keyDir, `bad-${seq}-${i}.json`);
        writeFileSync(bad, JSON.stringify(v));
        expect(script(bad).status).toBe(1);
      }
    }
  });
});
