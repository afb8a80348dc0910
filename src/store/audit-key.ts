/**
 * The audit signing key (Ed25519, PKCS#8 PEM in its own file, mode 0600) and the start-up check that the
 * database has not moved behind its last signed head. The last signed head is kept beside the key
 * (`<key>.head.json`), outside the data directory when the key is: an intruder who can rewrite the data
 * directory cannot roll it back.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  AppError,
  ConfigError,
  HeadSigner,
  ROLLBACK_ACTION,
  verifyHeadSignature,
  type AuditEntry,
  type AuditInput,
  type Clock,
  type KeyedAuditTree,
  type SignedHead,
} from '../core/index.js';
import { readLedger } from './audit-ledger.js';

export const ledgerPathFor = (keyPath: string) => `${keyPath}.head.json`;

/** Reads the key, creating it (0600, in a 0700 directory) on first use. Refuses a key others may read. */
export function openAuditKey(path: string): HeadSigner {
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    try {
      writeFileSync(path, HeadSigner.generatePem(), { mode: 0o600, flag: 'wx' });
      chmodSync(path, 0o600);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new ConfigError(`audit key ${path}: cannot create it (${(e as Error).message})`, { cause: e });
    }
  }
  const mode = statSync(path).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new ConfigError(`audit key ${path} is readable by others (mode ${mode.toString(8)}): chmod 600 it`, { details: { path, mode: mode.toString(8) } });
  }
  try {
    return HeadSigner.fromPem(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ConfigError(`audit key ${path}: not an Ed25519 private key in PEM (${(e as Error).message})`, { details: { path }, cause: e });
  }
}

/** An audit log that keeps a signed tree: SqliteAuditLog and PgAuditLog. */
export interface KeyedAuditLog {
  readonly tree: KeyedAuditTree;
  append(input: AuditInput): Promise<AuditEntry>;
  /** Accepts the database's head as the truth for the head anchor (see the stores' audit logs). */
  reanchor(): Promise<unknown>;
}

export interface AuditStartOptions {
  /** Either store: the check is the same over both. */
  store: { readonly audit: KeyedAuditLog };
  signer: HeadSigner;
  keyPath: string;
  /** Start even if the database is behind (or beside) its last signed head, and record that. */
  acceptRollback: boolean;
  clock: Clock;
  log: (line: string) => void;
}

/**
 * Compares the database with what was signed: the ledger beside the key (the last head signed anywhere)
 * and the head signed inside the database with the newest append. Any disagreement refuses the start with
 * 'invalid_state' unless acceptRollback, which rebuilds the tree from the rows, appends an
 * `audit.rollback_accepted` entry naming what was found, and signs the result.
 */
export async function checkAuditAtStart(o: AuditStartOptions): Promise<void> {
  const tree = o.store.audit.tree;
  const ledgerPath = ledgerPathFor(o.keyPath);
  const last = readLedger(ledgerPath);
  const head = await tree.head();
  const signed = await tree.signedHead();
  const { rows, leaves, lastLeafMatches } = await tree.rowsAndLastLeaf();
  const problems: string[] = [];
  if (rows !== leaves || !lastLeafMatches) problems.push(`the audit table has ${rows} entries but its tree ${leaves} leaves${lastLeafMatches ? '' : ' (the last entry is not the one the tree holds)'}`);
  if (signed !== undefined) {
    if (!verifyHeadSignature(o.signer.publicKey, signed)) problems.push('the head signed in the database does not verify with this key');
    else if (signed.treeSize !== head.treeSize || signed.rootHash !== head.rootHash) {
      problems.push(`the head signed in the database covers ${signed.treeSize} entries, the tree holds ${head.treeSize} with another root`);
    }
  }
  if (last !== undefined) {
    if (!verifyHeadSignature(o.signer.publicKey, last)) problems.push(`the last signed head in ${ledgerPath} does not verify with this key`);
    else if (head.treeSize < last.treeSize) problems.push(`the log has ${head.treeSize} entries, behind its last signed head of ${last.treeSize}`);
    else if ((await tree.rootAt(last.treeSize)) !== last.rootHash) problems.push(`the first ${last.treeSize} entries are not those of the last signed head`);
  }
  if (problems.length === 0) {
    if (signed === undefined || last === undefined) await tree.signNow(o.clock.now());
    return;
  }
  const details = { problems, lastSignedHead: last ?? null, signedInDatabase: signed ?? null, current: head, rows };
  if (!o.acceptRollback) {
    throw new AppError('invalid_state', `audit log does not match its last signed head: ${problems.join('; ')}. Refusing to start; --accept-audit-rollback starts anyway and records it`, { details });
  }
  o.log(`audit: starting with --accept-audit-rollback: ${problems.join('; ')}`);
  await o.store.audit.reanchor();
  await tree.rebuild(o.clock.now());
  await o.store.audit.append({
    tenantId: null,
    sessionId: null,
    principal: { kind: 'system', id: 'system', tenantId: null },
    action: ROLLBACK_ACTION,
    outcome: 'ok',
    data: details as unknown as Record<string, unknown>,
  });
}

export type { SignedHead };
