import { randomBytes, timingSafeEqual } from 'node:crypto';
import { AppError, sha256Hex, type Principal, type Store } from '../core/index.js';

/**
 * Credentials. Every secret is random, shown once, and stored only as its SHA-256. The prefix tells the
 * kind, and an agent token carries its session id so lookup needs no scan.
 *   root:     btr_<secret>
 *   operator: btk_<secret>           (one per tenant)
 *   agent:    bta_<sessionId>.<secret>
 */
export function newSecret(prefix: 'btr' | 'btk'): string {
  return `${prefix}_${randomBytes(24).toString('base64url')}`;
}
export function newAgentToken(sessionId: string): string {
  return `bta_${sessionId}.${randomBytes(24).toString('base64url')}`;
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

export async function authenticate(store: Store, rootKeyHash: string, token: string): Promise<Principal> {
  const h = sha256Hex(token);
  if (token.startsWith('btr_') && sameHash(h, rootKeyHash)) return { kind: 'root', id: 'root', tenantId: null };
  if (token.startsWith('btk_')) {
    const t = await store.tenants.getByKeyHash(h);
    if (t) return { kind: 'operator', id: t.id, tenantId: t.id };
  }
  if (token.startsWith('bta_')) {
    const sessionId = token.slice(4, token.indexOf('.'));
    const s = await store.sessions.get(sessionId);
    if (s && s.state !== 'terminated' && sameHash(h, s.agentTokenHash)) return { kind: 'agent', id: s.id, tenantId: s.tenantId };
  }
  throw new AppError('unauthenticated', 'the bearer token is not valid');
}
