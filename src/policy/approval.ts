/**
 * Approvals bind one call: the tool and the SHA-256 of its canonical arguments. An approval is spent by
 * the one call it was given for; a changed argument, a second run or a run after expiry needs a new one.
 */
import { canonicalJson, sha256Hex } from '../core/index.js';
import type { ApprovalRecordLike } from './types.js';

/** SHA-256 (hex) of the canonical JSON of {tool, args}. Throws TypeError for values JSON cannot carry. */
export function argsDigest(tool: string, args: unknown): string {
  return sha256Hex(canonicalJson({ tool, args }));
}

export type ApprovalCheck =
  /** Approved, in time, unused, for exactly this call: it may run (once). */
  | { status: 'match' }
  /** For this call, but nobody has decided yet. */
  | { status: 'pending' }
  | { status: 'denied'; by: string | null }
  /** Not decided (or not used) before expiresAt: counts as a deny. */
  | { status: 'expired'; at: number }
  /** Already spent by an earlier run. */
  | { status: 'used'; at: number }
  /** For another tool or other arguments: says nothing about this call. */
  | { status: 'mismatch'; field: 'tool' | 'args' };

/**
 * Checks an approval against a call. Order matters: an approval for another call is a mismatch whatever
 * its state; a spent one is used even if it has since expired; an operator's refusal stands even after
 * expiry.
 */
export function checkApproval(approval: ApprovalRecordLike, tool: string, args: unknown, now: number): ApprovalCheck {
  if (approval.tool !== tool) return { status: 'mismatch', field: 'tool' };
  if (approval.argsDigest !== argsDigest(tool, args)) return { status: 'mismatch', field: 'args' };
  if (approval.usedAt !== null) return { status: 'used', at: approval.usedAt };
  if (approval.status === 'denied') return { status: 'denied', by: approval.decidedBy };
  if (approval.expiresAt !== null && now >= approval.expiresAt) return { status: 'expired', at: approval.expiresAt };
  if (approval.status === 'pending') return { status: 'pending' };
  return { status: 'match' };
}
