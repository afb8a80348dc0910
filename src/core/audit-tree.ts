/**
 * Signed tree heads and proofs over the audit log's Merkle tree (core/merkle.ts). Pure: no files. The key
 * file and the ledger of the last signed head live in the store layer (src/store/audit-key.ts,
 * audit-ledger.ts); the tree's storage in each store (src/store/audit-tree.ts, src/store/postgres/audit-tree.ts),
 * which share what does not depend on the database (core/audit-tree-check.ts).
 *
 * A leaf is the entry's exact stored bytes, spelled as one JSON text (`entryLeafText`): the stored JSON
 * columns (principal, data) are spliced in verbatim, never re-parsed, so a stored column with a duplicated
 * key hashes differently from the entry it parses to.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto';
import { InvalidArgumentError } from './errors.js';

/** What is signed: the tree's size (entries), its RFC 6962 root (hex) and when it was signed (ms since the epoch). */
export interface TreeHead {
  treeSize: number;
  rootHash: string;
  timestamp: number;
}

export interface SignedHead extends TreeHead {
  /** sha256 of the raw 32-byte Ed25519 public key, hex: which key signed. */
  keyId: string;
  /** Ed25519 signature over headMessage(), base64. */
  signature: string;
}

export const HEAD_FORMAT = 'berth-audit-head/1';
export const INCLUSION_FORMAT = 'berth-audit-inclusion/1';

/** The signed bytes: four lines, each ending in \n: format tag, treeSize, rootHash (hex), timestamp (ms). */
export function headMessage(h: TreeHead): Buffer {
  return Buffer.from(`${HEAD_FORMAT}\n${h.treeSize}\n${h.rootHash}\n${h.timestamp}\n`, 'utf8');
}

/** The columns of a stored audit row, as stored (JSON columns as their raw text). */
export interface StoredEntryParts {
  seq: unknown;
  ts: unknown;
  tenantId: unknown;
  sessionId: unknown;
  principalJson: unknown;
  action: unknown;
  outcome: unknown;
  dataJson: unknown;
  prevHash: unknown;
  hash: unknown;
}

const scalar = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v) : v === null ? 'null' : typeof v === 'number' || typeof v === 'bigint' ? String(v) : JSON.stringify(String(v)));
const raw = (v: unknown): string => (typeof v === 'string' ? v : v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : String(v));

/**
 * The leaf bytes of an entry: a JSON object with the keys in canonical (sorted) order, scalar columns
 * JSON-encoded and the JSON columns inserted as stored. For an entry written by Berth this is exactly
 * canonicalJson(entry); for a hand-edited row it is whatever the row now holds.
 */
export function entryLeafText(p: StoredEntryParts): string {
  return (
    `{"action":${scalar(p.action)},"data":${raw(p.dataJson)},"hash":${scalar(p.hash)},"outcome":${scalar(p.outcome)},` +
    `"prevHash":${scalar(p.prevHash)},"principal":${raw(p.principalJson)},"seq":${scalar(p.seq)},` +
    `"sessionId":${scalar(p.sessionId)},"tenantId":${scalar(p.tenantId)},"ts":${scalar(p.ts)}}`
  );
}

/** sha256 of the raw public key, hex. */
export function keyIdOf(publicKey: KeyObject): string {
  return createHash('sha256').update(rawPublicKey(publicKey)).digest('hex');
}

function rawPublicKey(k: KeyObject): Buffer {
  // The SPKI DER of an Ed25519 key is a fixed 12-byte prefix and the 32-byte key.
  return (k.export({ format: 'der', type: 'spki' }) as Buffer).subarray(-32);
}

/** Accepts a PEM SPKI public key or the raw 32-byte key in base64. */
export function parsePublicKey(text: string): KeyObject {
  const t = text.trim();
  try {
    const key = t.startsWith('-----BEGIN')
      ? createPublicKey(t)
      : createPublicKey({ key: Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(t, 'base64')]), format: 'der', type: 'spki' });
    if (key.asymmetricKeyType !== 'ed25519') throw new Error(`not Ed25519 but ${key.asymmetricKeyType}`);
    return key;
  } catch (e) {
    throw new InvalidArgumentError(`public key: not an Ed25519 public key (${(e as Error).message})`, { details: { field: 'publicKey' } });
  }
}

/** An Ed25519 key pair held in memory; built from a PKCS#8 PEM by the server's key-file code. */
export class HeadSigner {
  readonly publicKey: KeyObject;
  readonly keyId: string;
  readonly #private: KeyObject;

  private constructor(priv: KeyObject) {
    this.#private = priv;
    this.publicKey = createPublicKey(priv);
    this.keyId = keyIdOf(this.publicKey);
  }

  static generatePem(): string {
    return generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }) as string;
  }

  static fromPem(pem: string): HeadSigner {
    const k = createPrivateKey(pem);
    if (k.asymmetricKeyType !== 'ed25519') throw new InvalidArgumentError(`audit key: not Ed25519 but ${k.asymmetricKeyType}`);
    return new HeadSigner(k);
  }

  get publicKeyPem(): string {
    return this.publicKey.export({ format: 'pem', type: 'spki' }) as string;
  }

  get publicKeyBase64(): string {
    return rawPublicKey(this.publicKey).toString('base64');
  }

  sign(h: TreeHead): SignedHead {
    const head: TreeHead = { treeSize: h.treeSize, rootHash: h.rootHash, timestamp: h.timestamp };
    return { ...head, keyId: this.keyId, signature: sign(null, headMessage(head), this.#private).toString('base64') };
  }
}

export function verifyHeadSignature(publicKey: KeyObject, h: SignedHead): boolean {
  try {
    return verify(null, headMessage(h), publicKey, Buffer.from(h.signature, 'base64'));
  } catch {
    return false;
  }
}

const HEX64 = /^[0-9a-f]{64}$/;

/** Validates a signed head read from a file or a request (`field` names it in the error). */
export function parseSignedHead(v: unknown, field: string): SignedHead {
  const bad = (what: string): never => {
    throw new InvalidArgumentError(`${field}: ${what}`, { details: { field } });
  };
  if (typeof v !== 'object' || v === null || Array.isArray(v)) bad('must be a signed tree head object');
  const o = v as Record<string, unknown>;
  if (!Number.isSafeInteger(o.treeSize) || (o.treeSize as number) < 0) bad('treeSize must be a non-negative integer');
  if (typeof o.rootHash !== 'string' || !HEX64.test(o.rootHash)) bad('rootHash must be 64 lowercase hex digits');
  if (!Number.isSafeInteger(o.timestamp) || (o.timestamp as number) < 0) bad('timestamp must be milliseconds since the epoch');
  if (typeof o.keyId !== 'string' || !HEX64.test(o.keyId)) bad('keyId must be 64 lowercase hex digits');
  if (typeof o.signature !== 'string' || !/^[A-Za-z0-9+/]+=*$/.test(o.signature)) bad('signature must be base64');
  return { treeSize: o.treeSize as number, rootHash: o.rootHash as string, timestamp: o.timestamp as number, keyId: o.keyId as string, signature: o.signature as string };
}

/** `berth audit prove`: everything a third party needs, with the public key, to check one entry. */
export interface InclusionDocument {
  format: typeof INCLUSION_FORMAT;
  seq: number;
  /** seq - 1: the leaf's position in the tree. */
  leafIndex: number;
  /** The leaf bytes (UTF-8): the entry exactly as stored. */
  entry: string;
  /** The audit path, leaf side first, hex (RFC 9162 §2.1.3.1). */
  proof: string[];
  /** A signed head whose treeSize the proof is for. */
  head: SignedHead;
}

export interface AuditKeyInfo {
  algorithm: 'Ed25519';
  keyId: string;
  /** SPKI PEM. */
  publicKey: string;
  /** The raw 32-byte key, base64. */
  publicKeyBase64: string;
}

export interface ConsistencyDocument {
  fromSize: number;
  toSize: number;
  proof: string[];
  /** A head signed now for toSize. */
  head: SignedHead;
}

/** How one published head compared with the tree the rows hold now. */
export interface CheckpointCheck {
  treeSize: number;
  rootHash: string;
  timestamp: number;
  keyId: string;
  ok: boolean;
  /**
   * 'signature': not signed by this log's key; 'truncated': the log now has fewer entries; 'rewritten': the
   * first treeSize entries differ; 'unsigned': entries after this head carry no signature; 'rollback': an
   * operator started the server with --accept-audit-rollback after this head (firstBadSeq: that entry).
   */
  problem?: 'signature' | 'truncated' | 'rewritten' | 'unsigned' | 'rollback';
  /** The first entry known to differ, where it can be found (the stored leaf hashes still match the head). */
  firstBadSeq?: number;
  /** The consistency proof from this head to the current tree (hex), when one exists. */
  proof?: string[];
}

export interface TreeVerifyResult {
  ok: boolean;
  /** The tree recomputed from the rows as stored. */
  treeSize: number;
  rootHash: string;
  /** The stored tree table against the rows: the first seq whose leaf hash differs, if any. */
  storedTreeFirstBadSeq?: number;
  /**
   * The head the store signed with its newest append, against the rows: 'unsigned' when rows follow it (an
   * entry appended outside Berth), 'truncated' or 'rewritten' when they no longer add up to it.
   */
  latestSigned?: CheckpointCheck;
  checkpoints: CheckpointCheck[];
}

/** The AuditTree port: the log's Merkle tree, read-only (appends happen with the entry, in the store). */
export interface AuditTree {
  /** Size and root of the stored tree (cheap: the frontier). */
  head(): Promise<{ treeSize: number; rootHash: string }>;
  /** Root of the first `size` leaves, from stored nodes. */
  rootAt(size: number): Promise<string>;
  /** The stored row for seq as its leaf text, with the tenant it belongs to; undefined if none. */
  entry(seq: number): Promise<{ text: string; tenantId: string | null } | undefined>;
  inclusionProof(seq: number, treeSize: number): Promise<string[]>;
  consistencyProof(fromSize: number, toSize: number): Promise<string[]>;
  /** Recomputes the tree from the rows and checks each head (signature with `publicKey`, then consistency). */
  verify(checkpoints: SignedHead[], publicKey: KeyObject): Promise<TreeVerifyResult>;
}

/** Rows in the audit table (its last seq), leaves in the tree, and whether the last row's leaf is the stored one. */
export interface RowsAndLeaves {
  rows: number;
  leaves: number;
  lastLeafMatches: boolean;
}

/**
 * The tree as a store exposes it to the server's start-up (src/store/audit-key.ts) and to the engine's
 * AuditProofs: the port, plus signing with the server's key and the operator-accepted rebuild. Both stores
 * implement it, so the start check and the proof routes are one piece of code over either.
 */
export interface KeyedAuditTree extends AuditTree {
  /**
   * Signs a head with every append from now on (the server attaches its key before it serves), and after
   * each commit records that head in `ledgerPath`, a file beside the key, outside the data directory
   * (written in the background; `log` hears of a write that failed).
   */
  attachSigner(signer: HeadSigner, opts?: { ledgerPath?: string; log?: (line: string) => void }): Promise<void>;
  /** The head signed with the newest committed append, if a signer was attached by then. */
  signedHead(): Promise<SignedHead | undefined>;
  /** Signs the current head now (a checkpoint; or a first head for an old log); records it in the ledger. */
  signNow(timestamp: number): Promise<SignedHead>;
  rowsAndLastLeaf(): Promise<RowsAndLeaves>;
  /**
   * Operator-accepted recovery (`--accept-audit-rollback`): the tree is rebuilt from the rows as they stand
   * and signed. The only code that deletes tree nodes; the caller records that it ran.
   */
  rebuild(timestamp: number): Promise<SignedHead | undefined>;
}
