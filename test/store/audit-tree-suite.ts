/**
 * The signed Merkle tree over the audit log, the same on every store (run by sqlite.test.ts and
 * postgres.test.ts against real databases): a leaf is the entry's stored bytes, every append adds its leaf
 * and a signed head in the entry's transaction, and the proofs it serves are checked by the independent
 * verifier of test/helpers (not by core/merkle.ts, which made them). Then the attacks of someone with
 * write access to the database but not to the key: a row appended by hand, a truncated or wiped table, an
 * edited entry with the chain (and the tree) recomputed with the project's own code. Each must fail
 * verification against a published signed head, and those that leave the tree or its head behind must make
 * the next start refuse (the ledger beside the key) unless the operator accepts the rollback.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  HeadSigner,
  canonicalJson,
  entryLeafText,
  hashEntry,
  partsOfRow,
  verifyHeadSignature,
  type AuditEntry,
  type AuditInput,
  type Clock,
  type SignedHead,
  type StoredAuditRow,
} from '../../src/core/index.js';
import { MerkleFrontier, type CompletedNode } from '../../src/core/merkle.js';
import { checkAuditAtStart, type KeyedAuditLog } from '../../src/store/audit-key.js';
import { verifyAudit } from '../../src/store/audit.js';
import { checkConsistency, checkInclusion, mth } from '../helpers/merkle-verifier.js';
import type { StoreUnderTest } from './store-suite.js';

export type TreeStore = StoreUnderTest & { readonly audit: KeyedAuditLog };
type Row = StoredAuditRow & { seq: number; ts: number; hash: string; prev_hash: string; principal: string; data: string; outcome: string; action: string };

export interface AuditTreeHarness {
  /** A store over a fresh, empty database; no key attached. */
  open(clock: Clock): Promise<TreeStore>;
  /** A new store over the database of `store` (which the suite closed): what a restart opens. */
  reopen(store: TreeStore, clock: Clock): Promise<TreeStore>;
  /** One statement through a connection of its own, as someone with database access runs it; `$1`… parameters. */
  sql(store: TreeStore, statement: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  /** Lifts the append-only guards of `audit` and `audit_tree`, as that someone can. */
  dropGuards(store: TreeStore): Promise<void>;
  /** Statements against an existing tree node that the guards must refuse ('append-only'). */
  refusedOnTree: readonly string[];
}

const signer = HeadSigner.fromPem(HeadSigner.generatePem());
const otherKey = HeadSigner.fromPem(HeadSigner.generatePem());

const input = (n: number): AuditInput => ({
  tenantId: 'ten_a',
  sessionId: null,
  principal: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' },
  action: 'tool.call',
  outcome: 'ok',
  data: { n, text: 'ünïcödé "quoted"', list: [1, { b: 2, a: null }] },
});

const hexes = (p: string[]) => p.map((h) => Buffer.from(h, 'hex'));

/** The stored bytes of every row, as the log returns them. */
async function storedTexts(s: TreeStore): Promise<Buffer[]> {
  return (await s.audit.query({})).map((e) => Buffer.from(canonicalJson(e), 'utf8'));
}

export function auditTreeConformance(name: string, h: AuditTreeHarness): void {
  describe(`${name} audit tree`, () => {
    let t: number;
    const clock: Clock = { now: () => (t += 1000) };
    let keyDir: string;
    const open: TreeStore[] = [];

    const track = (s: TreeStore) => {
      open.push(s);
      return s;
    };
    const fresh = async () => {
      const s = track(await h.open(clock));
      await s.audit.tree.attachSigner(signer);
      return s;
    };
    const ledgerPath = () => join(keyDir, 'audit.key.head.json');
    /** What the server does at start: the key and its ledger, then the check against them. */
    const start = async (s: TreeStore, acceptRollback = false) => {
      await s.audit.tree.attachSigner(signer, { ledgerPath: ledgerPath() });
      await checkAuditAtStart({ store: s, signer, keyPath: join(keyDir, 'audit.key'), acceptRollback, clock, log: () => undefined });
      return s;
    };
    const restart = async (s: TreeStore) => {
      await s.close();
      return track(await h.reopen(s, clock));
    };
    const rows = async (s: TreeStore) => (await h.sql(s, 'SELECT * FROM audit ORDER BY seq')) as unknown as Row[];

    beforeEach(() => {
      t = 1_700_000_000_000;
      keyDir = mkdtempSync(join(tmpdir(), 'berth-tree-key-'));
    });
    afterEach(async () => {
      for (const s of open.splice(0)) await s.close();
      rmSync(keyDir, { recursive: true, force: true });
    });

    it('a leaf is canonicalJson(entry), the root is MTH over them, and the head signed with each append covers it', async () => {
      const s = await fresh();
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
      expect(await s.audit.tree.entry(14)).toBeUndefined();
    });

    it('appends inside one store transaction get one head, signed at COMMIT; a savepoint that undid the last append is not signed', async () => {
      const s = await fresh();
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
      const s = await fresh();
      for (let i = 1; i <= 13; i++) await s.audit.append(input(i));
      const texts = await storedTexts(s);
      for (let n = 1; n <= 13; n++) {
        const root = mth(texts.slice(0, n));
        expect(await s.audit.tree.rootAt(n)).toBe(root.toString('hex'));
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
      await expect(s.audit.tree.inclusionProof(1, 14)).rejects.toMatchObject({ code: 'invalid_argument' });
      await expect(s.audit.tree.inclusionProof(9, 8)).rejects.toMatchObject({ code: 'not_found' });
      await expect(s.audit.tree.consistencyProof(9, 8)).rejects.toMatchObject({ code: 'invalid_argument' });
    });

    it('an append rolled back with its transaction leaves no leaf, and the next one lands where it should', async () => {
      const s = await fresh();
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
      const s = await fresh();
      for (let i = 1; i <= 5; i++) await s.audit.append(input(i));
      // As a database from before the tree would be: rows, but no nodes and no head.
      await h.dropGuards(s);
      await h.sql(s, 'DELETE FROM audit_tree');
      await h.sql(s, 'DELETE FROM audit_signed_head');
      const s2 = await restart(s);
      const texts = await storedTexts(s2);
      expect(await s2.audit.tree.head()).toEqual({ treeSize: 5, rootHash: mth(texts).toString('hex') });
      await start(s2); // no head anywhere yet: the start signs the first
      expect(await s2.audit.tree.verify([], signer.publicKey)).toMatchObject({ ok: true, treeSize: 5, latestSigned: { ok: true, treeSize: 5 } });
    });

    it('the tree table is append-only', async () => {
      const s = await fresh();
      await s.audit.append(input(1));
      for (const statement of h.refusedOnTree) await expect(h.sql(s, statement), statement).rejects.toThrow('append-only');
      expect(await s.audit.tree.verify([], signer.publicKey)).toMatchObject({ ok: true, treeSize: 1 });
    });

    describe('against an intruder with database access (and a head published outside it)', () => {
      /** A log with a published checkpoint and a clean start behind it. */
      async function fixture(): Promise<{ s: TreeStore; head: SignedHead; n: number }> {
        const s = await start(track(await h.open(clock)));
        for (let i = 1; i <= 6; i++) await s.audit.append(input(i));
        const head = await s.audit.tree.signNow(clock.now());
        expect(head.treeSize).toBe(6);
        expect(await s.audit.tree.verify([head], signer.publicKey)).toMatchObject({ ok: true, checkpoints: [{ ok: true }] });
        return { s, head, n: 6 };
      }

      const verdict = (s: TreeStore, head: SignedHead) => s.audit.tree.verify([head], signer.publicKey);
      const expectRestartRefused = async (s: TreeStore) => {
        const again = await restart(s);
        await expect(start(again)).rejects.toMatchObject({ code: 'invalid_state' });
        return again;
      };
      /** The whole tree table recomputed from the rows with the project's code, as a careful intruder would. */
      async function rebuildTree(s: TreeStore): Promise<void> {
        await h.sql(s, 'DELETE FROM audit_tree');
        const f = MerkleFrontier.empty();
        for (const r of await rows(s)) for (const n of f.append(Buffer.from(entryLeafText(partsOfRow(r))))) await insertNode(s, n);
      }
      const insertNode = (s: TreeStore, n: CompletedNode) => h.sql(s, 'INSERT INTO audit_tree (level, idx, hash) VALUES ($1, $2, $3)', [n.level, n.index, n.hash]);
      const decode = (r: Row): Omit<AuditEntry, 'hash'> => ({
        seq: r.seq, ts: r.ts, tenantId: r.tenant_id as string | null, sessionId: r.session_id as string | null,
        principal: JSON.parse(r.principal), action: r.action, outcome: r.outcome, data: JSON.parse(r.data), prevHash: r.prev_hash,
      });
      /** Rewrites every hash from `from` on with the project's hash function, so the chain verifies again. */
      async function rechain(s: TreeStore, from: number): Promise<void> {
        const all = await rows(s);
        let prev = from === 1 ? '0'.repeat(64) : (all[from - 2] as Row).hash;
        for (const r of all.filter((x) => x.seq >= from)) {
          const hash = hashEntry({ ...decode(r), prevHash: prev });
          await h.sql(s, 'UPDATE audit SET prev_hash = $1, hash = $2 WHERE seq = $3', [prev, hash, r.seq]);
          prev = hash;
        }
      }

      it('untouched: verifies, and restarts cleanly', async () => {
        const { s, head } = await fixture();
        const again = await start(await restart(s));
        await again.audit.append(input(7));
        expect(await verdict(again, head)).toMatchObject({ ok: true, treeSize: 7, latestSigned: { ok: true, treeSize: 7 }, checkpoints: [{ ok: true, treeSize: 6 }] });
      });

      it('a row appended by hand, with a valid chain hash and its leaf: unsigned; later appends stay unsigned; the restart is refused', async () => {
        const { s, head, n } = await fixture();
        const all = await rows(s);
        const last = all.at(-1)!;
        const forged = { ...decode(last), seq: n + 1, ts: last.ts + 1, action: 'session.exec', data: { argv: ['true'] }, prevHash: last.hash };
        await h.sql(s, 'INSERT INTO audit (seq, ts, tenant_id, session_id, principal, action, outcome, data, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', [
          forged.seq, forged.ts, forged.tenantId, forged.sessionId, last.principal, forged.action, forged.outcome, JSON.stringify(forged.data), forged.prevHash, hashEntry(forged),
        ]);
        // Only the nodes the new leaf completes: new positions, which the guards let through.
        const f = MerkleFrontier.empty();
        for (const r of all) f.append(Buffer.from(entryLeafText(partsOfRow(r))));
        const [forgedRow] = (await rows(s)).slice(n);
        for (const node of f.append(Buffer.from(entryLeafText(partsOfRow(forgedRow!))))) await insertNode(s, node);
        expect(await verifyAudit(s)).toMatchObject({ ok: true }); // the chain alone cannot tell
        expect(await verdict(s, head)).toMatchObject({ ok: false, checkpoints: [{ ok: true }], latestSigned: { ok: false, problem: 'unsigned', firstBadSeq: n + 1 } });
        // The server does not sign over it: its next entry is unsigned too, and a checkpoint is refused.
        await s.audit.append(input(8));
        expect(await verdict(s, head)).toMatchObject({ ok: false, latestSigned: { problem: 'unsigned', firstBadSeq: n + 1 } });
        await expect(s.audit.tree.signNow(clock.now())).rejects.toMatchObject({ code: 'invalid_state' });
        await expectRestartRefused(s);
      });

      it('a truncated table, tree rebuilt to match: truncated; refused at restart; --accept-audit-rollback starts, records it, and the old head still fails', async () => {
        const { s, head } = await fixture();
        await h.dropGuards(s);
        await h.sql(s, 'DELETE FROM audit WHERE seq > 3');
        await rebuildTree(s);
        expect(await verdict(s, head)).toMatchObject({ ok: false, checkpoints: [{ ok: false, problem: 'truncated', firstBadSeq: 4 }] });
        const again = await expectRestartRefused(s);
        await start(again, true);
        const entries = await again.audit.query({});
        expect(entries.map((e) => e.action).at(-1)).toBe('audit.rollback_accepted');
        expect(entries.at(-1)?.data).toMatchObject({ lastSignedHead: { treeSize: 6 } }); // the ledger's: the published checkpoint
        expect(await again.audit.tree.verify([], signer.publicKey)).toMatchObject({ ok: true, treeSize: 4 });
        expect(await verdict(again, head)).toMatchObject({ ok: false, checkpoints: [{ ok: false, problem: 'truncated' }] });
        // The accepted state is the new baseline: the next start passes.
        await start(await restart(again));
      });

      it('the table wiped with its tree and head: truncated from the first entry; refused at restart', async () => {
        const { s, head } = await fixture();
        await h.dropGuards(s);
        for (const table of ['audit', 'audit_tree', 'audit_signed_head']) await h.sql(s, `DELETE FROM ${table}`);
        expect(await verdict(s, head)).toMatchObject({ ok: false, treeSize: 0, checkpoints: [{ ok: false, problem: 'truncated', firstBadSeq: 1 }] });
        await expectRestartRefused(s);
      });

      it('an entry edited and the chain recomputed after it (tree left alone): rewritten, naming the entry', async () => {
        const { s, head } = await fixture();
        await h.dropGuards(s);
        await h.sql(s, "UPDATE audit SET outcome = 'deny' WHERE seq = 2");
        await rechain(s, 2);
        // The chain links again (only a head anchor file, where there is one, still names the old last hash).
        const chain = await verifyAudit(s);
        expect(chain.ok || chain.anchor === 'mismatch').toBe(true);
        expect(await verdict(s, head)).toMatchObject({ ok: false, storedTreeFirstBadSeq: 2, checkpoints: [{ ok: false, problem: 'rewritten', firstBadSeq: 2 }] });
        await expectRestartRefused(s);
      });

      it('the same with the tree table recomputed too: rewritten; refused at restart', async () => {
        const { s, head } = await fixture();
        await h.dropGuards(s);
        await h.sql(s, "UPDATE audit SET outcome = 'deny' WHERE seq = 2");
        await rechain(s, 2);
        await rebuildTree(s);
        const v = await verdict(s, head);
        expect(v).toMatchObject({ ok: false, checkpoints: [{ ok: false, problem: 'rewritten' }], latestSigned: { ok: false, problem: 'rewritten' } });
        expect(v.storedTreeFirstBadSeq).toBeUndefined(); // the stored tree matches the rows: only the signatures tell
        await expectRestartRefused(s);
      });

      it('a stored entry given a duplicated JSON key (it parses to the same entry, so the chain verifies): rewritten', async () => {
        const { s, head } = await fixture();
        await h.dropGuards(s);
        const r = (await rows(s))[2]!;
        const dup = `{"n":99,${r.data.slice(1)}`; // JSON.parse keeps the later "n"
        expect(JSON.parse(dup)).toEqual(JSON.parse(r.data));
        await h.sql(s, 'UPDATE audit SET data = $1 WHERE seq = $2', [dup, r.seq]);
        expect(await verifyAudit(s)).toMatchObject({ ok: true });
        expect(await verdict(s, head)).toMatchObject({ ok: false, checkpoints: [{ ok: false, problem: 'rewritten', firstBadSeq: r.seq }] });
      });

      it('a head not signed by this log\'s key: signature', async () => {
        const { s, head } = await fixture();
        const forged = otherKey.sign({ treeSize: 1, rootHash: await s.audit.tree.rootAt(1), timestamp: clock.now() });
        const v = await s.audit.tree.verify([head, forged, { ...head, treeSize: 5 }], signer.publicKey);
        expect(v.checkpoints.map((c) => c.problem ?? 'ok')).toEqual(['ok', 'signature', 'signature']);
      });
    });
  });
}
