/**
 * The audit tree in SQLite: the leaf is the entry's stored bytes, every append adds its leaf and a signed
 * head in the entry's transaction, and the proofs it serves are checked by the independent verifier of
 * test/helpers (not by core/merkle.ts, which made them).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HeadSigner, canonicalJson, verifyHeadSignature, type AuditInput } from '../core/index.js';
import { checkConsistency, checkInclusion, mth } from '../../test/helpers/merkle-verifier.js';
import { openSqliteStore, type SqliteStore } from './sqlite.js';

let dir: string;
let dbPath: string;
let t: number;
const clock = { now: () => (t += 1000) };
const open: SqliteStore[] = [];
const signer = HeadSigner.fromPem(HeadSigner.generatePem());

function openStore(): SqliteStore {
  const s = openSqliteStore({ path: dbPath, clock });
  s.audit.tree.attachSigner(signer);
  open.push(s);
  return s;
}

const input = (n: number): AuditInput => ({
  tenantId: 'ten_a',
  sessionId: null,
  principal: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' },
  action: 'tool.call',
  outcome: 'ok',
  data: { n, text: 'ünïcödé "quoted"', list: [1, { b: 2, a: null }] },
});

/** The stored bytes of every row, read straight from the file with its own connection. */
async function storedTexts(s: SqliteStore): Promise<Buffer[]> {
  return (await s.audit.query({})).map((e) => Buffer.from(canonicalJson(e), 'utf8'));
}
const hexes = (p: string[]) => p.map((h) => Buffer.from(h, 'hex'));

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'berth-audit-tree-'));
  dbPath = join(dir, 'berth.db');
  t = 1_700_000_000_000;
});
/**
 * Closed stores are kept reachable: better-sqlite3 12 on Node 24 can abort the process when V8 finalizes a
 * Statement from a GC inside a microtask checkpoint (`Assertion failed: (env) != nullptr`), and these tests
 * await thousands of proofs.
 */
const retained: SqliteStore[] = [];
afterEach(() => {
  for (const s of open.splice(0)) {
    s.close();
    retained.push(s);
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('audit tree', () => {
  it('a leaf is canonicalJson(entry), the root is MTH over them, and the head signed with each append covers it', async () => {
    const s = openStore();
    for (let i = 1; i <= 13; i++) {
      await s.audit.append(input(i));
      const texts = await storedTexts(s);
      const head = await s.audit.tree.head();
      expect(head).toEqual({ treeSize: i, rootHash: mth(texts).toString('hex') });
      const signed = await s.audit.tree.signedHead();
      expect(signed).toMatchObject(head);
      expect(verifyHeadSignature(signer.publicKey, signed!)).toBe(true);
    }
    expect((await s.audit.tree.entry(5))?.text).toBe((await storedTexts(s))[4]?.toString());
  });

  it('appends inside one store transaction get one head, signed at COMMIT; a savepoint that undid the last append is not signed', async () => {
    const s = openStore();
    await s.audit.append(input(1));
    const before = await s.audit.tree.signedHead();
    await s.transaction(async (tx) => {
      await s.audit.append(input(2));
      await s.audit.append(input(3));
      expect(await s.audit.tree.signedHead()).toEqual(before); // not yet: once, at the end
      await tx.transaction(async () => {
        await s.audit.append(input(4));
        throw new Error('inner');
      }).catch(() => undefined);
    });
    const texts = await storedTexts(s);
    expect(texts).toHaveLength(3);
    const signed = await s.audit.tree.signedHead();
    expect(signed).toMatchObject({ treeSize: 3, rootHash: mth(texts).toString('hex') });
    expect(verifyHeadSignature(signer.publicKey, signed!)).toBe(true);
    expect(await s.audit.tree.verify([], signer.publicKey)).toMatchObject({ ok: true, treeSize: 3, latestSigned: { ok: true, treeSize: 3 } });
  });

  it('inclusion and consistency proofs for every index and size pass the independent verifier, and fail for another entry', async () => {
    const s = openStore();
    for (let i = 1; i <= 13; i++) await s.audit.append(input(i));
    const texts = await storedTexts(s);
    for (let n = 1; n <= 13; n++) {
      const root = mth(texts.slice(0, n));
      for (let seq = 1; seq <= n; seq++) {
        const proof = hexes(await s.audit.tree.inclusionProof(seq, n));
        expect(checkInclusion(texts[seq - 1]!, seq - 1, n, proof, root)).toBe(true);
        if (n > 1) expect(checkInclusion(texts[seq % n]!, seq - 1, n, proof, root)).toBe(false);
      }
      for (let m = 0; m <= n; m++) {
        const proof = hexes(await s.audit.tree.consistencyProof(m, n));
        expect(checkConsistency(m, n, mth(texts.slice(0, m)), root, proof)).toBe(true);
        if (m > 0 && m < n) expect(checkConsistency(m, n, mth(texts.slice(1, m + 1)), root, proof)).toBe(false);
      }
    }
  });

  it('an append rolled back with its transaction leaves no leaf, and the next one lands where it should', async () => {
    const s = openStore();
    for (let i = 1; i <= 3; i++) await s.audit.append(input(i));
    await expect(
      s.transaction(async () => {
        await s.audit.append(input(99));
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    await s.transaction(async (tx) => {
      try {
        await tx.transaction(async () => {
          await s.audit.append(input(98));
          throw new Error('inner');
        });
      } catch {
        // the savepoint rolled back; the outer transaction goes on
      }
      await s.audit.append(input(4));
    });
    const texts = await storedTexts(s);
    expect(texts).toHaveLength(4);
    expect(await s.audit.tree.head()).toEqual({ treeSize: 4, rootHash: mth(texts).toString('hex') });
    const v = await s.audit.tree.verify([], signer.publicKey);
    expect(v).toMatchObject({ ok: true, treeSize: 4, latestSigned: { ok: true, treeSize: 4 } });
  });

  it('rows from before the tree existed get their leaves when the store opens', async () => {
    const s = openStore();
    for (let i = 1; i <= 5; i++) await s.audit.append(input(i));
    s.close();
    // As a schema-3 database would be: rows but no tree.
    const raw = new Database(dbPath);
    raw.exec('DROP TRIGGER audit_tree_no_delete; DELETE FROM audit_tree; DELETE FROM audit_signed_head;');
    raw.close();
    const s2 = openStore();
    const texts = await storedTexts(s2);
    expect(await s2.audit.tree.head()).toEqual({ treeSize: 5, rootHash: mth(texts).toString('hex') });
  });

  it('the tree table is append-only', async () => {
    const s = openStore();
    await s.audit.append(input(1));
    s.close();
    const raw = new Database(dbPath);
    try {
      expect(() => raw.exec('DELETE FROM audit_tree')).toThrow('append-only');
      expect(() => raw.exec('UPDATE audit_tree SET hash = x\'00\'')).toThrow('append-only');
      expect(() => raw.exec("INSERT OR REPLACE INTO audit_tree (level, idx, hash) VALUES (0, 0, x'00')")).toThrow('append-only');
    } finally {
      raw.close();
    }
  });
});
