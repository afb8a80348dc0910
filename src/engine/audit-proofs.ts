/**
 * Signed checkpoints and proofs over the audit tree, with who may ask for what: the public key,
 * checkpoints and consistency proofs for root and operators (they reveal sizes and hashes only); an
 * inclusion proof for root, or for the operator whose tenant the entry belongs to (it carries the entry);
 * verification against published heads for root (it reads every entry).
 */
import {
  AppError,
  INCLUSION_FORMAT,
  NotFoundError,
  InvalidArgumentError,
  type AuditKeyInfo,
  type AuditTree,
  type ConsistencyDocument,
  type Clock,
  type HeadSigner,
  type InclusionDocument,
  type Principal,
  type SignedHead,
  type TreeVerifyResult,
} from '../core/index.js';

/** The tree as the engine needs it: the port plus signing a fresh head. */
export interface SigningAuditTree extends AuditTree {
  signNow(timestamp: number): Promise<SignedHead>;
  signedHead(): Promise<SignedHead | undefined>;
}

export interface AuditProofsOptions {
  tree: SigningAuditTree;
  signer: HeadSigner;
  clock: Clock;
}

function operatorOrRoot(p: Principal, what: string): void {
  if (p.kind !== 'root' && p.kind !== 'operator') throw new AppError('forbidden', `an agent token may not ${what}`);
}

export class AuditProofs {
  constructor(private readonly o: AuditProofsOptions) {}

  key(p: Principal): AuditKeyInfo {
    operatorOrRoot(p, 'read the audit key');
    const s = this.o.signer;
    return { algorithm: 'Ed25519', keyId: s.keyId, publicKey: s.publicKeyPem, publicKeyBase64: s.publicKeyBase64 };
  }

  /** A head over the whole tree, signed now (and recorded as the last signed head). */
  async checkpoint(p: Principal): Promise<SignedHead> {
    operatorOrRoot(p, 'sign audit checkpoints');
    return this.o.tree.signNow(this.o.clock.now());
  }

  /** A signed head for `treeSize` (default: the whole tree). */
  async #headFor(treeSize: number | undefined): Promise<SignedHead> {
    const head = await this.o.tree.head();
    if (treeSize === undefined || treeSize === head.treeSize) return this.o.tree.signNow(this.o.clock.now());
    if (!Number.isSafeInteger(treeSize) || treeSize < 0 || treeSize > head.treeSize) {
      throw new InvalidArgumentError(`treeSize: must be an integer 0..${head.treeSize}`, { details: { field: 'treeSize', treeSize: head.treeSize } });
    }
    // A head for an earlier size states what the tree held then; it is not recorded as the last signed head.
    return this.o.signer.sign({ treeSize, rootHash: await this.o.tree.rootAt(treeSize), timestamp: this.o.clock.now() });
  }

  async prove(p: Principal, seq: number, opts: { treeSize?: number } = {}): Promise<InclusionDocument> {
    operatorOrRoot(p, 'read audit proofs');
    const entry = Number.isSafeInteger(seq) && seq >= 1 ? await this.o.tree.entry(seq) : undefined;
    if (entry === undefined || (p.kind === 'operator' && entry.tenantId !== p.tenantId)) throw new NotFoundError('audit entry', String(seq));
    const head = await this.#headFor(opts.treeSize);
    if (seq > head.treeSize) {
      throw new InvalidArgumentError(`treeSize: entry ${seq} is not in a tree of ${head.treeSize}`, { details: { field: 'treeSize' } });
    }
    const proof = await this.o.tree.inclusionProof(seq, head.treeSize);
    return { format: INCLUSION_FORMAT, seq, leafIndex: seq - 1, entry: entry.text, proof, head };
  }

  async consistency(p: Principal, fromSize: number, toSize?: number): Promise<ConsistencyDocument> {
    operatorOrRoot(p, 'read audit proofs');
    const head = await this.#headFor(toSize);
    if (!Number.isSafeInteger(fromSize) || fromSize < 0 || fromSize > head.treeSize) {
      throw new InvalidArgumentError(`from: must be an integer 0..${head.treeSize}`, { details: { field: 'from' } });
    }
    return { fromSize, toSize: head.treeSize, proof: await this.o.tree.consistencyProof(fromSize, head.treeSize), head };
  }

  async verify(p: Principal, checkpoints: SignedHead[]): Promise<TreeVerifyResult> {
    if (p.kind !== 'root') throw new AppError('forbidden', 'only the root token may verify the whole audit log');
    return this.o.tree.verify(checkpoints, this.o.signer.publicKey);
  }
}
