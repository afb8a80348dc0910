/**
 * Watch-only links (issue 10): an operator shares an expiring, revocable, read-only link to one session's
 * console view. The link's token is 32 random bytes (base64url, `bwl_` prefix), shown once; only its SHA-256
 * is stored. One link serves several viewers until it expires or is revoked.
 *
 * A viewer is the principal `{ kind: 'watcher', id: <sessionId>, tenantId }`: like an agent it sees one
 * session and nothing else, and unlike every other principal it may do nothing; the engine lets it read that
 * session's record, plan, control lease and audit entries and watch (never type into) its terminals, and
 * refuses it everything else (gate-context.ts requireOperator). The console re-checks the link on every
 * request through principalOf, so a revoked or expired link ends its console sessions at once.
 */
import { randomBytes } from 'node:crypto';
import { AppError, InvalidArgumentError, NotFoundError, newId, sha256Hex, type Clock, type Principal, type Store, type WatchLinkRecord } from '../core/index.js';
import { who } from './gate-context.js';

/** Default lifetime of a link, ms (1 h). */
export const DEFAULT_WATCH_LINK_TTL_MS = 3_600_000;
/** Shortest and longest lifetime a link may be given, ms (1 min, 30 days). */
export const WATCH_LINK_TTL_MS = { min: 60_000, max: 30 * 86_400_000 } as const;
const TOKEN_RE = /^bwl_[A-Za-z0-9_-]{43}$/;

export interface WatchLinkService {
  /** An operator's link to one of their sessions; the token is in the result only. Audited console.watch_link.create. */
  create(p: Principal, sessionId: string, o?: { ttlMs?: number; label?: string }): Promise<{ link: WatchLinkRecord; token: string }>;
  list(p: Principal, sessionId: string): Promise<WatchLinkRecord[]>;
  /** Idempotent on an already revoked link. Audited console.watch_link.revoke. */
  revoke(p: Principal, sessionId: string, linkId: string): Promise<WatchLinkRecord>;
  /** The live link a token stands for; unauthenticated when unknown, expired or revoked. */
  open(token: string): Promise<WatchLinkRecord>;
  /** The watcher principal of a link id, re-checked (unauthenticated once it expired or was revoked). */
  principalOf(linkId: string): Promise<Principal>;
}

export interface WatchLinkSteps {
  store: Store;
  clock: Clock;
  /** Authorizes an operator act on the session (tenant scope, operator only); returns its tenant. */
  operatorSession(p: Principal, sessionId: string): Promise<{ tenantId: string }>;
  audit(p: Principal, tenantId: string, sessionId: string, action: string, data: Record<string, unknown>): Promise<void>;
  /** A link was revoked: whatever its viewers hold open (terminal sockets) ends. */
  revoked(link: WatchLinkRecord): void;
}

export function watcherPrincipal(l: WatchLinkRecord): Principal {
  return { kind: 'watcher', id: l.sessionId, tenantId: l.tenantId };
}

function ended(l: WatchLinkRecord | undefined, now: number): string | null {
  if (!l) return 'this watch link is not valid';
  if (l.revokedAt !== null) return 'this watch link was revoked';
  if (now >= l.expiresAt) return 'this watch link has expired';
  return null;
}

export function watchLinkService(m: WatchLinkSteps): WatchLinkService {
  const mine = async (p: Principal, sessionId: string, linkId: string) => {
    await m.operatorSession(p, sessionId);
    const l = typeof linkId === 'string' ? await m.store.watchLinks.get(linkId) : undefined;
    if (!l || l.sessionId !== sessionId) throw new NotFoundError('watch link', String(linkId));
    return l;
  };
  return {
    async create(p, sessionId, o = {}) {
      const ttlMs = o.ttlMs ?? DEFAULT_WATCH_LINK_TTL_MS;
      if (!Number.isSafeInteger(ttlMs) || ttlMs < WATCH_LINK_TTL_MS.min || ttlMs > WATCH_LINK_TTL_MS.max) {
        throw new InvalidArgumentError(`ttlS: must be an integer from ${WATCH_LINK_TTL_MS.min / 1000} to ${WATCH_LINK_TTL_MS.max / 1000} seconds`, { details: { field: 'ttlS' } });
      }
      if (o.label !== undefined && (typeof o.label !== 'string' || o.label.length > 200)) throw new InvalidArgumentError('label: at most 200 characters', { details: { field: 'label' } });
      const { tenantId } = await m.operatorSession(p, sessionId);
      const r = await m.store.sessions.get(sessionId);
      if (r && (r.state === 'terminated' || r.state === 'failed')) throw new AppError('invalid_state', `session ${sessionId} is ${r.state}; there is nothing to watch`, { details: { state: r.state } });
      const token = `bwl_${randomBytes(32).toString('base64url')}`;
      const now = m.clock.now();
      const link: WatchLinkRecord = { id: newId('watchLink'), tenantId, sessionId, tokenHash: sha256Hex(token), label: o.label ?? null, createdBy: who(p), createdAt: now, expiresAt: now + ttlMs, revokedAt: null };
      await m.store.watchLinks.insert(link);
      await m.audit(p, tenantId, sessionId, 'console.watch_link.create', { linkId: link.id, label: link.label, expiresAt: link.expiresAt });
      return { link, token };
    },

    async list(p, sessionId) {
      await m.operatorSession(p, sessionId);
      return m.store.watchLinks.listBySession(sessionId);
    },

    async revoke(p, sessionId, linkId) {
      const l = await mine(p, sessionId, linkId);
      if (l.revokedAt !== null) return l;
      const done = { ...l, revokedAt: m.clock.now() };
      await m.store.watchLinks.put(done);
      await m.audit(p, l.tenantId, sessionId, 'console.watch_link.revoke', { linkId: l.id, label: l.label });
      m.revoked(done);
      return done;
    },

    async open(token) {
      const l = typeof token === 'string' && TOKEN_RE.test(token) ? await m.store.watchLinks.getByTokenHash(sha256Hex(token)) : undefined;
      const why = ended(l, m.clock.now());
      if (why || !l) throw new AppError('unauthenticated', `${why}; ask the operator who shared it for a new one`, { details: { reason: 'watch_link' } });
      return l;
    },

    async principalOf(linkId) {
      const l = await m.store.watchLinks.get(linkId);
      const why = ended(l, m.clock.now());
      if (why || !l) throw new AppError('unauthenticated', `${why}; this watch session has ended`, { details: { reason: 'watch_link' } });
      return watcherPrincipal(l);
    },
  };
}
