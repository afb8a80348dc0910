/**
 * Audit rows: what the Merkle tree and the head signed with every append cost, and what checkpoints and
 * proofs cost on a big log.
 *
 *   npx tsx bench/audit.ts                 append + gated call (memory driver, HTTP, SQLite file)
 *   npx tsx bench/audit.ts --entries 1e6   also builds a log of that many entries and times checkpoint,
 *                                          proofs and a full verification over it, with proof sizes
 *
 * The gated call runs through the real engine, gate, Cedar and SQLite file, over HTTP, with the in-memory
 * driver, so the audit append is as large a share of it as it can be (a runsc call adds ~ms of sandbox).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { systemClock, type AuditInput } from '../src/core/index.js';
import { MemoryDriver } from '../src/drivers/memory/driver.js';
import { newSecret } from '../src/engine/auth.js';
import { createApp } from '../src/server/app.js';
import { composeEngine } from '../src/server/compose.js';
import { startServer } from '../src/server/serve.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { LocalSnapshotStore } from '../src/store/snapshot-dir.js';
import { Berth } from '../src/sdk/index.js';
import { gateRow, percentile, row, sample, samplePair, type Row } from './stats.js';

const entry = (i: number): AuditInput => ({
  tenantId: 'ten_bench',
  sessionId: 'ses_bench',
  principal: { kind: 'agent', id: 'ses_bench', tenantId: 'ten_bench' },
  action: 'tool.call',
  outcome: 'ok',
  data: { tool: 'fs.list', args: { path: `/work/${i}` }, stage: 'executed', ms: 3 },
});

async function appendRow(dir: string): Promise<Row> {
  const store = openSqliteStore({ path: join(dir, 'append.db'), clock: systemClock });
  collect();
  try {
    const t: number[] = [];
    for (let i = 0; i < 500; i++) await store.audit.append(entry(i));
    for (let i = 0; i < 3000; i++) {
      const t0 = performance.now();
      await store.audit.append(entry(i));
      t.push(performance.now() - t0);
    }
    return row('audit append (own transaction, file DB)', 'audit', t, null, '');
  } finally {
    store.close();
  }
}

async function gatedRow(dir: string): Promise<Row> {
  const store = openSqliteStore({ path: join(dir, 'gate.db'), clock: systemClock });
  const driver = new MemoryDriver({});
  const rootKey = newSecret('btr');
  const side = await composeEngine({ dataDir: dir, store, snapshots: new LocalSnapshotStore(join(dir, 'snapshots')), drivers: { [driver.name]: driver }, rootKey, clock: systemClock, idleSweepMs: 0 });
  const http = await startServer({ app: createApp({ engine: side.engine }), host: '127.0.0.1', port: 0 });
  collect();
  try {
    const berth = new Berth({ url: http.url, token: rootKey });
    const s = await berth.sessions.create({});
    await berth.gate.set(s.id, { breaker: { perMinute: 100_000 } }); // the benchmark's own rate would trip it
    for (let i = 0; i < 100; i++) await berth.tools.call(s.id, 'fs.list', { path: '/' });
    const [gated, ungated] = await samplePair(1000, () => berth.tools.call(s.id, 'fs.list', { path: '/' }), () => s.files.list('/'));
    return gateRow('fs.list through the gate, memory driver (raw: ungated files/list route)', 'audit', gated, ungated);
  } finally {
    await http.close();
    await side.close();
  }
}

async function bigLog(dir: string, n: number, log: (s: string) => void): Promise<Row[]> {
  const { HeadSigner } = await import('../src/core/index.js');
  const store = openSqliteStore({ path: join(dir, 'big.db'), clock: systemClock });
  const signer = HeadSigner.fromPem(HeadSigner.generatePem());
  store.audit.tree.attachSigner(signer);
  collect();
  try {
    const t0 = performance.now();
    for (let done = 0; done < n; ) {
      const k = Math.min(10_000, n - done);
      await store.transaction(async () => {
        for (let i = 0; i < k; i++) await store.audit.append(entry(done + i));
      });
      done += k;
      if (done % 100_000 === 0) log(`audit: ${done} entries`);
    }
    const buildS = (performance.now() - t0) / 1000;
    const tree = store.audit.tree;
    const cp = await sample(50, () => tree.signNow(Date.now()));
    const head = (await tree.signedHead())!;
    const { verifyHeadSignature } = await import('../src/core/index.js');
    const ver: number[] = [];
    for (let i = 0; i < 200; i++) {
      const a = performance.now();
      verifyHeadSignature(signer.publicKey, head);
      ver.push(performance.now() - a);
    }
    const seqs = [1, Math.floor(n / 3), n - 1, n];
    const incl = await sample(50, () => tree.inclusionProof(seqs[1]!, n));
    const sizes = await Promise.all(seqs.map(async (s) => (await tree.inclusionProof(s, n)).length));
    const cons = await sample(50, () => tree.consistencyProof(Math.floor(n / 2) + 1, n));
    const consLen = (await tree.consistencyProof(Math.floor(n / 2) + 1, n)).length;
    const doc = JSON.stringify({ entry: (await tree.entry(seqs[1]!))?.text, proof: await tree.inclusionProof(seqs[1]!, n), head });
    const v0 = performance.now();
    const res = await tree.verify([head], signer.publicKey);
    const verifyS = (performance.now() - v0) / 1000;
    if (!res.ok) throw new Error('the benchmark log does not verify');
    const r = (x: number) => Math.round(x * 1000) / 1000;
    return [
      { ...row(`checkpoint (sign a head) at ${n} entries`, 'audit', cp, null, ''), note: `built in ${r(buildS)} s` },
      { ...row('verify a head signature (Ed25519)', 'audit', ver, null, '') },
      { ...row(`inclusion proof at ${n} entries`, 'audit', incl, null, ''), note: `${sizes.join('/')} hashes (${sizes.map((x) => x * 32).join('/')} bytes) for seq ${seqs.join('/')}; prove document ${doc.length} bytes` },
      { ...row(`consistency proof ${Math.floor(n / 2) + 1} → ${n}`, 'audit', cons, null, ''), note: `${consLen} hashes (${consLen * 32} bytes)` },
      { ...row(`full verify (recompute ${n} leaves + 1 checkpoint)`, 'audit', [verifyS * 1000], null, ''), note: `p50 ${percentile([verifyS], 50).toFixed(2)} s` },
    ];
  } finally {
    store.close();
  }
}

/**
 * better-sqlite3 12 on Node 24 can abort the process when V8 finalizes a garbage Statement from a GC that
 * runs outside any context (a microtask checkpoint): `Assertion failed: (env) != nullptr`. Collecting from
 * plain JS (node --expose-gc) finalizes the throw-away statements (migrations') safely first.
 */
const collect = () => (globalThis as { gc?: () => void }).gc?.();

export async function benchAudit(o: { entries?: number; log?: (s: string) => void } = {}): Promise<Row[]> {
  const log = o.log ?? (() => undefined);
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-audit-'));
  try {
    const rows = [await appendRow(dir), await gatedRow(dir)];
    if (o.entries) rows.push(...(await bigLog(dir, o.entries, log)));
    return rows;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const i = process.argv.indexOf('--entries');
  const entries = i > 0 ? Number(process.argv[i + 1]) : undefined;
  const rows = await benchAudit({ entries, log: (s) => console.error(`[bench] ${s}`) });
  const { printTable } = await import('./stats.js');
  printTable(rows);
}
