/**
 * The audit log as a Merkle tree in the form of RFC 6962 §2.1 (RFC 9162 §2.1): SHA-256, leaf hash
 * H(0x00 || entry bytes), interior node H(0x01 || left || right), the tree over n leaves split at the
 * largest power of two below n.
 *
 * Storage keeps the hash of every *perfect* subtree (2^level leaves starting at index·2^level), which is all
 * the proofs and the root of any size need: `NodeReader.node(level, index)`. `MerkleFrontier` is what an
 * appender holds to produce those nodes as leaves arrive. Verification (inclusion and consistency proofs,
 * RFC 9162 §2.1.3.2 and §2.1.4.2) needs nothing but hashes and sizes, so a third party can run it.
 */
import { createHash } from 'node:crypto';

const LEAF = Buffer.from([0]);
const NODE = Buffer.from([1]);

export function leafHash(entryBytes: Uint8Array): Buffer {
  return createHash('sha256').update(LEAF).update(entryBytes).digest();
}

export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  return createHash('sha256').update(NODE).update(left).update(right).digest();
}

/** SHA-256 of the empty string: the root of the tree with no leaves. */
export const EMPTY_ROOT = createHash('sha256').digest();

/** Hashes of perfect subtrees: level 0 is the leaves; node(l, i) covers leaves [i·2^l, (i+1)·2^l). */
export interface NodeReader {
  node(level: number, index: number): Promise<Uint8Array>;
}

/** A perfect subtree completed by an append, for storage. */
export interface CompletedNode {
  level: number;
  index: number;
  hash: Buffer;
}

/** The largest power of two strictly below n (n ≥ 2). */
function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

const isPow2 = (n: number) => n > 0 && (n & (n - 1)) === 0 && n <= 2 ** 52;

/**
 * The right edge of the tree: one hash per set bit of the size, the roots of its perfect subtrees from the
 * largest down. Appending a leaf merges equal-sized subtrees and reports every node it completed.
 */
export class MerkleFrontier {
  private constructor(
    private size: number,
    /** Roots of the perfect subtrees, largest first; their sizes are the set bits of `size`. */
    private readonly stack: Buffer[],
  ) {}

  static empty(): MerkleFrontier {
    return new MerkleFrontier(0, []);
  }

  /** Rebuilds the frontier of a stored tree of `size` leaves from its perfect nodes. */
  static async load(size: number, nodes: NodeReader): Promise<MerkleFrontier> {
    const stack: Buffer[] = [];
    let start = 0;
    for (let level = 52; level >= 0; level--) {
      const width = 2 ** level;
      if (Math.floor(size / width) % 2 === 1) {
        stack.push(Buffer.from(await nodes.node(level, start / width)));
        start += width;
      }
    }
    return new MerkleFrontier(size, stack);
  }

  /** load() for a synchronous reader (the embedded store reads nodes synchronously inside its transaction). */
  static loadSync(size: number, node: (level: number, index: number) => Uint8Array): MerkleFrontier {
    const stack: Buffer[] = [];
    let start = 0;
    for (let level = 52; level >= 0; level--) {
      const width = 2 ** level;
      if (Math.floor(size / width) % 2 === 1) {
        stack.push(Buffer.from(node(level, start / width)));
        start += width;
      }
    }
    return new MerkleFrontier(size, stack);
  }

  get treeSize(): number {
    return this.size;
  }

  /** Adds one leaf; returns the perfect subtrees it completed (the leaf itself first). */
  append(entryBytes: Uint8Array): CompletedNode[] {
    const index = this.size;
    let hash = leafHash(entryBytes);
    const done: CompletedNode[] = [{ level: 0, index, hash }];
    let level = 0;
    // Each trailing 1-bit of the old size is a subtree of the same height to merge with.
    while (Math.floor(index / 2 ** level) % 2 === 1) {
      const left = this.stack.pop() as Buffer;
      hash = nodeHash(left, hash);
      level++;
      done.push({ level, index: Math.floor(index / 2 ** level), hash });
    }
    this.stack.push(hash);
    this.size++;
    return done;
  }

  /** The root hash of the tree as it stands. */
  root(): Buffer {
    if (this.stack.length === 0) return EMPTY_ROOT;
    let h = this.stack[this.stack.length - 1] as Buffer;
    for (let i = this.stack.length - 2; i >= 0; i--) h = nodeHash(this.stack[i] as Buffer, h);
    return h;
  }
}

/** A tree held in memory as one buffer per level (32 bytes a node): 64 MB at 10^6 leaves. */
export class MemoryTree implements NodeReader {
  readonly levels: Buffer[];
  /** `leaves`: the leaf hashes, 32 bytes each, in order. */
  constructor(readonly size: number, leaves: Buffer) {
    this.levels = [leaves];
    let prev = leaves;
    for (let n = Math.floor(size / 2); n >= 1; n = Math.floor(n / 2)) {
      const next = Buffer.allocUnsafe(n * 32);
      for (let i = 0; i < n; i++) nodeHash(prev.subarray(64 * i, 64 * i + 32), prev.subarray(64 * i + 32, 64 * i + 64)).copy(next, 32 * i);
      this.levels.push(next);
      prev = next;
    }
  }
  async node(level: number, index: number): Promise<Uint8Array> {
    return this.nodeSync(level, index);
  }
  nodeSync(level: number, index: number): Uint8Array {
    const l = this.levels[level];
    if (l === undefined || (index + 1) * 32 > l.length) throw new RangeError(`no node (${level}, ${index})`);
    return l.subarray(32 * index, 32 * index + 32);
  }
  leaf(i: number): Buffer {
    return (this.levels[0] as Buffer).subarray(32 * i, 32 * i + 32);
  }
  /** Every node, for writing the whole tree back to storage. */
  *nodes(): Generator<CompletedNode> {
    for (let level = 0; level < this.levels.length; level++) {
      const n = (this.levels[level] as Buffer).length / 32;
      for (let index = 0; index < n; index++) yield { level, index, hash: Buffer.from(this.nodeSync(level, index)) };
    }
  }
}

export interface NodePosition {
  level: number;
  index: number;
}

/**
 * Runs `run` over nodes read in one batch, for storage where each read is a round trip. Which nodes a root,
 * a proof or a frontier reads depends on the sizes alone, never on hash values, so a first run over
 * placeholder hashes learns the positions, `fetch` reads them all at once, and a second run computes.
 */
export async function withNodes<T>(fetch: (wanted: readonly NodePosition[]) => Promise<NodeReader>, run: (nodes: NodeReader) => Promise<T>): Promise<T> {
  const wanted = new Map<string, NodePosition>();
  const placeholder = Buffer.alloc(32);
  await run({
    node: async (level, index) => {
      wanted.set(`${level}/${index}`, { level, index });
      return placeholder;
    },
  });
  return run(await fetch([...wanted.values()]));
}

/**
 * MTH(D[start : start+n]) for a range whose start is a multiple of the largest power of two below n (true
 * of every range the root and the proofs below ask for).
 */
async function rangeHash(nodes: NodeReader, start: number, n: number): Promise<Uint8Array> {
  if (isPow2(n) && start % n === 0) return nodes.node(Math.log2(n), start / n);
  const k = splitPoint(n);
  return nodeHash(await rangeHash(nodes, start, k), await rangeHash(nodes, start + k, n - k));
}

export async function rootOf(nodes: NodeReader, size: number): Promise<Uint8Array> {
  return size === 0 ? EMPTY_ROOT : rangeHash(nodes, 0, size);
}

/** PATH(m, D[start : start+n]) of RFC 6962 §2.1.1: the audit path of leaf `m`, leaf-side first. */
async function path(nodes: NodeReader, m: number, start: number, n: number): Promise<Uint8Array[]> {
  if (n === 1) return [];
  const k = splitPoint(n);
  if (m < k) return [...(await path(nodes, m, start, k)), await rangeHash(nodes, start + k, n - k)];
  return [...(await path(nodes, m - k, start + k, n - k)), await rangeHash(nodes, start, k)];
}

/** The inclusion proof of leaf `index` (0-based) in the tree of `size` leaves. */
export async function inclusionProof(nodes: NodeReader, index: number, size: number): Promise<Uint8Array[]> {
  if (!(Number.isInteger(index) && Number.isInteger(size) && index >= 0 && index < size)) {
    throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  }
  return path(nodes, index, 0, size);
}

/** SUBPROOF(m, D[start : start+n], b) of RFC 6962 §2.1.2. */
async function subproof(nodes: NodeReader, m: number, start: number, n: number, b: boolean): Promise<Uint8Array[]> {
  if (m === n) return b ? [] : [await rangeHash(nodes, start, n)];
  const k = splitPoint(n);
  if (m <= k) return [...(await subproof(nodes, m, start, k, b)), await rangeHash(nodes, start + k, n - k)];
  return [...(await subproof(nodes, m - k, start + k, n - k, false)), await rangeHash(nodes, start, k)];
}

/** The consistency proof from the tree of `oldSize` leaves to the tree of `newSize`. */
export async function consistencyProof(nodes: NodeReader, oldSize: number, newSize: number): Promise<Uint8Array[]> {
  if (!(Number.isInteger(oldSize) && Number.isInteger(newSize) && oldSize >= 0 && oldSize <= newSize)) {
    throw new RangeError(`no consistency proof from ${oldSize} to ${newSize}`);
  }
  if (oldSize === 0 || oldSize === newSize) return [];
  return subproof(nodes, oldSize, 0, newSize, true);
}

const eq = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

/** RFC 9162 §2.1.3.2: does `proof` show that the leaf with `leaf` hash is at `index` of the tree with `root`? */
export function verifyInclusion(leaf: Uint8Array, index: number, size: number, proof: Uint8Array[], root: Uint8Array): boolean {
  if (!(Number.isInteger(index) && Number.isInteger(size) && index >= 0 && index < size)) return false;
  let fn = index;
  let sn = size - 1;
  let r: Uint8Array = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && eq(r, root);
}

/** RFC 9162 §2.1.4.2: does `proof` show the tree (`newSize`, `newRoot`) extends (`oldSize`, `oldRoot`)? */
export function verifyConsistency(oldSize: number, newSize: number, oldRoot: Uint8Array, newRoot: Uint8Array, proof: Uint8Array[]): boolean {
  if (!(Number.isInteger(oldSize) && Number.isInteger(newSize) && oldSize >= 0 && oldSize <= newSize)) return false;
  if (oldSize === newSize) return proof.length === 0 && eq(oldRoot, newRoot);
  if (oldSize === 0) return proof.length === 0;
  if (proof.length === 0) return false;
  let path = [...proof];
  if (isPow2(oldSize)) path = [oldRoot, ...path];
  let fn = oldSize - 1;
  let sn = newSize - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr: Uint8Array = path[0] as Uint8Array;
  let sr: Uint8Array = path[0] as Uint8Array;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && eq(fr, oldRoot) && eq(sr, newRoot);
}
