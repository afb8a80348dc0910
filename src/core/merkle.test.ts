import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkConsistency, checkInclusion, mth } from '../../test/helpers/merkle-verifier.js';
import { EMPTY_ROOT, MerkleFrontier, consistencyProof, inclusionProof, leafHash, rootOf, verifyConsistency, verifyInclusion, type NodeReader } from './merkle.js';

/** Perfect nodes kept as an appender would store them. */
class Nodes implements NodeReader {
  readonly map = new Map<string, Buffer>();
  reads = 0;
  async node(level: number, index: number): Promise<Uint8Array> {
    this.reads++;
    const h = this.map.get(`${level}/${index}`);
    if (!h) throw new Error(`no node ${level}/${index}`);
    return h;
  }
}

function grow(leaves: Uint8Array[]): { nodes: Nodes; frontier: MerkleFrontier } {
  const nodes = new Nodes();
  const frontier = MerkleFrontier.empty();
  for (const l of leaves) for (const c of frontier.append(l)) nodes.map.set(`${c.level}/${c.index}`, c.hash);
  return { nodes, frontier };
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

// The Certificate Transparency reference vectors (leaf inputs and the roots of the first 1..8 leaves).
const CT_LEAVES = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map((x) => Buffer.from(x, 'hex'));
const CT_ROOTS = [
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];

describe('merkle tree (RFC 6962)', () => {
  it('matches the Certificate Transparency reference roots, and the empty tree is SHA-256("")', async () => {
    expect(hex(EMPTY_ROOT)).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    for (let n = 1; n <= 8; n++) {
      const { nodes, frontier } = grow(CT_LEAVES.slice(0, n));
      expect(hex(frontier.root())).toBe(CT_ROOTS[n - 1]);
      expect(hex(await rootOf(nodes, n))).toBe(CT_ROOTS[n - 1]);
    }
  });

  it('every root, inclusion and consistency proof up to 40 leaves checks with the product and with an independent verifier', async () => {
    const leaves = Array.from({ length: 40 }, (_, i) => randomBytes(1 + (i % 7)));
    const { nodes } = grow(leaves);
    for (let n = 1; n <= leaves.length; n++) {
      const root = await rootOf(nodes, n);
      expect(hex(root)).toBe(hex(mth(leaves.slice(0, n))));
      for (let m = 0; m < n; m++) {
        const p = await inclusionProof(nodes, m, n);
        expect(verifyInclusion(leafHash(leaves[m] as Uint8Array), m, n, p, root)).toBe(true);
        expect(checkInclusion(leaves[m] as Uint8Array, m, n, p, root)).toBe(true);
      }
      for (let m = 1; m <= n; m++) {
        const p = await consistencyProof(nodes, m, n);
        const old = await rootOf(nodes, m);
        expect(verifyConsistency(m, n, old, root, p)).toBe(true);
        expect(checkConsistency(m, n, old, root, p)).toBe(true);
      }
    }
  });

  it('a changed leaf, a wrong index, an edited proof or a rewritten old tree fail', async () => {
    const leaves = Array.from({ length: 21 }, () => randomBytes(8));
    const { nodes } = grow(leaves);
    const root = await rootOf(nodes, 21);
    const p = await inclusionProof(nodes, 5, 21);
    expect(verifyInclusion(leafHash(randomBytes(8)), 5, 21, p, root)).toBe(false);
    expect(verifyInclusion(leafHash(leaves[5] as Uint8Array), 6, 21, p, root)).toBe(false);
    // Flip a bit, so the edit is an edit whatever the byte was (setting it to a constant is a no-op 1 time in 256).
    const bad = p.map((x, i) => {
      if (i !== 2) return x;
      const y = Buffer.from(x);
      y[0] = (y[0] as number) ^ 0x01;
      return y;
    });
    expect(verifyInclusion(leafHash(leaves[5] as Uint8Array), 5, 21, bad, root)).toBe(false);
    expect(checkInclusion(leaves[5] as Uint8Array, 5, 21, bad, root)).toBe(false);

    // The same 13-leaf prefix with one entry rewritten: no proof links its root to the real tree.
    const forged = grow(leaves.map((l, i) => (i === 9 ? randomBytes(8) : l)));
    const forgedOld = await rootOf(forged.nodes, 13);
    const c = await consistencyProof(nodes, 13, 21);
    expect(verifyConsistency(13, 21, forgedOld, root, c)).toBe(false);
    expect(checkConsistency(13, 21, forgedOld, root, c)).toBe(false);
    expect(verifyConsistency(13, 21, await rootOf(nodes, 13), root, c.slice(1))).toBe(false);
    expect(verifyConsistency(16, 21, await rootOf(nodes, 16), root, [])).toBe(false);
  });

  it('a frontier loaded from stored nodes continues exactly where the appender stopped', async () => {
    const leaves = Array.from({ length: 300 }, () => randomBytes(4));
    const { nodes } = grow(leaves.slice(0, 173));
    const f = await MerkleFrontier.load(173, nodes);
    expect(hex(f.root())).toBe(hex(mth(leaves.slice(0, 173))));
    for (const l of leaves.slice(173)) for (const c of f.append(l)) nodes.map.set(`${c.level}/${c.index}`, c.hash);
    expect(hex(f.root())).toBe(hex(mth(leaves)));
    expect(hex(await rootOf(nodes, 300))).toBe(hex(f.root()));
  });

  it('a proof reads O(log² n) stored nodes, not the whole tree', async () => {
    const { nodes } = grow(Array.from({ length: 1 << 12 }, (_, i) => Buffer.from(String(i))));
    nodes.reads = 0;
    await inclusionProof(nodes, 1234, 4000);
    await consistencyProof(nodes, 1000, 4000);
    expect(nodes.reads).toBeLessThan(200);
  });

  it('refuses sizes and indexes outside the tree', async () => {
    const { nodes } = grow([Buffer.from('a')]);
    await expect(inclusionProof(nodes, 1, 1)).rejects.toThrow(RangeError);
    await expect(consistencyProof(nodes, 2, 1)).rejects.toThrow(RangeError);
  });
});
