/**
 * An independent RFC 6962 verifier for tests: written from the recursive definitions of §2.1 (MTH, PATH,
 * PROOF), sharing no code with src/core/merkle.ts, so a proof the product makes is checked by something
 * that did not make it.
 */
import { createHash } from 'node:crypto';

const h = (...parts: Uint8Array[]) => {
  const x = createHash('sha256');
  for (const p of parts) x.update(p);
  return x.digest();
};
export const leaf = (bytes: Uint8Array) => h(Uint8Array.of(0), bytes);
const node = (l: Uint8Array, r: Uint8Array) => h(Uint8Array.of(1), l, r);
const split = (n: number) => 2 ** Math.ceil(Math.log2(n) - 1);
const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));

/** MTH(D[n]) straight from the leaves. */
export function mth(leaves: Uint8Array[]): Buffer {
  if (leaves.length === 0) return h();
  if (leaves.length === 1) return leaf(leaves[0] as Uint8Array);
  const k = split(leaves.length);
  return node(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

/** The root an inclusion proof implies for leaf hash `lh` at `m` of `n`, or undefined if it cannot. */
function rootFromPath(lh: Uint8Array, m: number, n: number, proof: Uint8Array[]): Uint8Array | undefined {
  if (n === 1) return proof.length === 0 ? lh : undefined;
  if (proof.length === 0) return undefined;
  const k = split(n);
  const last = proof[proof.length - 1] as Uint8Array;
  const rest = proof.slice(0, -1);
  if (m < k) {
    const l = rootFromPath(lh, m, k, rest);
    return l && node(l, last);
  }
  const r = rootFromPath(lh, m - k, n - k, rest);
  return r && node(last, r);
}

export function checkInclusion(entryBytes: Uint8Array, m: number, n: number, proof: Uint8Array[], root: Uint8Array): boolean {
  if (m < 0 || m >= n) return false;
  const r = rootFromPath(leaf(entryBytes), m, n, proof);
  return r !== undefined && same(r, root);
}

/**
 * Walks PROOF(m, D[n]) (RFC 6962 §2.1.2) backwards: returns [old subtree root, new subtree root] for
 * SUBPROOF(m, D[n], b), where `oldRoot` stands in for the old tree when b is true and m == n.
 */
function fromSubproof(m: number, n: number, b: boolean, proof: Uint8Array[], oldRoot: Uint8Array): [Uint8Array, Uint8Array] | undefined {
  if (m === n) {
    if (b) return proof.length === 0 ? [oldRoot, oldRoot] : undefined;
    return proof.length === 1 ? [proof[0] as Uint8Array, proof[0] as Uint8Array] : undefined;
  }
  if (proof.length === 0) return undefined;
  const k = split(n);
  const last = proof[proof.length - 1] as Uint8Array;
  const rest = proof.slice(0, -1);
  if (m <= k) {
    const x = fromSubproof(m, k, b, rest, oldRoot);
    // The old tree lies wholly in the left half: its root is the left half's old root.
    return x && [x[0], node(x[1], last)];
  }
  const x = fromSubproof(m - k, n - k, false, rest, oldRoot);
  return x && [node(last, x[0]), node(last, x[1])];
}

export function checkConsistency(m: number, n: number, oldRoot: Uint8Array, newRoot: Uint8Array, proof: Uint8Array[]): boolean {
  if (m < 0 || m > n) return false;
  if (m === n) return proof.length === 0 && same(oldRoot, newRoot);
  if (m === 0) return proof.length === 0;
  const x = fromSubproof(m, n, true, proof, oldRoot);
  return x !== undefined && same(x[0], oldRoot) && same(x[1], newRoot);
}
