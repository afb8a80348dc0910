/**
 * Port links (issue 9 §3): a signed, expiring URL that reaches one port of one session from a browser
 * with no bearer token (`/p/<token>/…` on the server's own origin). The token is 32 random bytes
 * (base64url); only its SHA-256 is stored, so the URL is shown once, when the link is created. A link
 * works until it expires, is revoked, or its session is terminated; whichever of these ended it, and for
 * a token that never existed, open() throws the same not_found, so a dead link says nothing about the
 * session behind it. Create, list and revoke are operator calls in the session's tenant (agent tokens are
 * refused, another tenant's session is not found), audited as `session.port_link.create` / `.revoke`;
 * each connection through a link is audited by the port service with `via: 'link'` and the link's id,
 * under the principal that created the link.
 */
import { randomBytes } from 'node:crypto';
import {
  AppError,
  InvalidArgumentError,
  NotFoundError,
  newId,
  sha256Hex,
  type CallOptions,
  type Clock,
  type PortLinkRecord,
  type Principal,
  type SessionRecord,
  type Store,
} from '../core/index.js';
import { checkPortNumber, type PortConnection, type PortService } from './ports.js';

/** Seconds a link lives: default 1 h, at most 7 days. */
export const PORT_LINK_TTL_S = Object.freeze({ default: 3600, min: 1, max: 604_800 });
/** A label is for people reading a list: at most this many characters. */
export const PORT_LINK_LABEL_MAX = 200;

export type PortLinkState = 'active' | 'expired' | 'revoked' | 'ended';

export interface PortLinkInput {
  port: unknown;
  /** Seconds; default PORT_LINK_TTL_S.default. */
  ttlS?: unknown;
  label?: unknown;
}

export interface PortLinkView extends PortLinkRecord {
  state: PortLinkState;
}

export interface PortLinkService {
  /** The token is returned here only: the store keeps its hash. */
  create(p: Principal, sessionId: string, input: PortLinkInput): Promise<{ link: PortLinkView; token: string }>;
  /** Every link of the session (any state), oldest first. */
  list(p: Principal, sessionId: string): Promise<PortLinkView[]>;
  /** Idempotent: revoking a dead link answers it as it is. */
  revoke(p: Principal, sessionId: string, linkId: string): Promise<PortLinkView>;
  /** A connection to the link's port; the token is the credential. not_found for any link that does not work. */
  open(token: string, opts?: CallOptions): Promise<PortConnection & { link: PortLinkRecord }>;
}

export interface PortLinkDeps {
  store: Store;
  clock: Clock;
  ports: PortService;
  /** The session as p may see it, refusing agent tokens (the manager's requireOperator + record). */
  session(p: Principal, sessionId: string): Promise<SessionRecord>;
  audit(p: Principal, tenantId: string, sessionId: string, action: string, data: Record<string, unknown>): Promise<unknown>;
}

/** 32 random bytes, base64url (43 characters). */
export function newPortLinkToken(): string {
  return randomBytes(32).toString('base64url');
}

const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

export function portLinkState(r: PortLinkRecord, now: number, sessionState: string | undefined): PortLinkState {
  if (r.revokedAt !== null) return 'revoked';
  if (sessionState === undefined || sessionState === 'terminated') return 'ended';
  return now < r.expiresAt ? 'active' : 'expired';
}

function checkTtl(raw: unknown): number {
  if (raw === undefined) return PORT_LINK_TTL_S.default;
  if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < PORT_LINK_TTL_S.min || raw > PORT_LINK_TTL_S.max) {
    throw new InvalidArgumentError(`ttlS: must be an integer number of seconds from ${PORT_LINK_TTL_S.min} to ${PORT_LINK_TTL_S.max} (7 days)`, {
      details: { field: 'ttlS', ttlS: raw ?? null },
    });
  }
  return raw;
}

function checkLabel(raw: unknown): string | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'string' || raw.length > PORT_LINK_LABEL_MAX || /[\u0000-\u001f\u007f]/.test(raw)) {
    throw new InvalidArgumentError(`label: a string of at most ${PORT_LINK_LABEL_MAX} characters without control characters`, { details: { field: 'label' } });
  }
  return raw;
}

/** What every dead or unknown link answers: the same error, whichever the reason. */
const gone = (): NotFoundError => new NotFoundError('port link', 'this link', { details: { reason: 'unknown, expired or revoked' } });

export function portLinkService(d: PortLinkDeps): PortLinkService {
  const view = (r: PortLinkRecord, s: SessionRecord | undefined): PortLinkView => ({ ...r, state: portLinkState(r, d.clock.now(), s?.state) });
  return {
    async create(p, sessionId, input) {
      const s = await d.session(p, sessionId);
      const port = checkPortNumber(input.port);
      const ttlS = checkTtl(input.ttlS);
      const label = checkLabel(input.label);
      if (s.state === 'terminated') throw new NotFoundError('session', sessionId, { details: { state: 'terminated' } });
      if (p.kind !== 'root' && p.kind !== 'operator') throw new AppError('forbidden', 'only an operator or root may create port links');
      const token = newPortLinkToken();
      const now = d.clock.now();
      const link: PortLinkRecord = {
        id: newId('portLink'),
        tenantId: s.tenantId,
        sessionId,
        port,
        tokenHash: sha256Hex(token),
        label,
        createdAt: now,
        expiresAt: now + ttlS * 1000,
        createdBy: { kind: p.kind, id: p.id, tenantId: p.tenantId },
        revokedAt: null,
        revokedBy: null,
      };
      await d.store.transaction(async (tx) => {
        await tx.portLinks.insert(link);
        await d.audit(p, s.tenantId, sessionId, 'session.port_link.create', { linkId: link.id, port, ttlS, label, expiresAt: link.expiresAt });
      });
      return { link: view(link, s), token };
    },

    async list(p, sessionId) {
      const s = await d.session(p, sessionId);
      return (await d.store.portLinks.list(sessionId)).map((r) => view(r, s));
    },

    async revoke(p, sessionId, linkId) {
      const s = await d.session(p, sessionId);
      return d.store.transaction(async (tx) => {
        const r = await tx.portLinks.get(linkId);
        if (!r || r.sessionId !== sessionId) throw new NotFoundError('port link', linkId);
        if (r.revokedAt !== null) return view(r, s);
        const revoked: PortLinkRecord = { ...r, revokedAt: d.clock.now(), revokedBy: { kind: p.kind, id: p.id } };
        await tx.portLinks.put(revoked);
        await d.audit(p, s.tenantId, sessionId, 'session.port_link.revoke', { linkId, port: r.port });
        return view(revoked, s);
      });
    },

    async open(token, opts = {}) {
      if (typeof token !== 'string' || !TOKEN_RE.test(token)) throw gone();
      const r = await d.store.portLinks.getByTokenHash(sha256Hex(token));
      if (!r) throw gone();
      const s = await d.store.sessions.get(r.sessionId);
      if (portLinkState(r, d.clock.now(), s?.state) !== 'active') throw gone();
      const conn = await d.ports.open(r.createdBy, r.sessionId, r.port, { ...opts, via: 'link', linkId: r.id });
      return { ...conn, link: r };
    },
  };
}
