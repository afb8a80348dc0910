/**
 * Wire types of port links (issue 9 §3): POST/GET /v1/sessions/:id/port-links, DELETE …/:linkId. The
 * link itself is `url` (`<origin>/p/<token>/`), answered by create only: the server keeps the token's
 * hash, so a list shows each link without its URL.
 */
import * as z from 'zod';
import { iso } from './views.js';

/** Seconds a link lives (the engine checks the same bounds). */
export const PORT_LINK_TTL = { min: 1, max: 604_800, default: 3600 } as const;

export const PortLinkCreateBodySchema = z.strictObject({
  port: z.number().int().min(1).max(65535),
  ttlS: z.number().int().min(PORT_LINK_TTL.min).max(PORT_LINK_TTL.max).optional().describe('seconds; default 3600 (1 h), at most 604800 (7 days)'),
  label: z.string().max(200).optional().describe('for people reading the list'),
});
export type PortLinkCreateBody = z.output<typeof PortLinkCreateBodySchema>;

export interface PortLinkView {
  linkId: string;
  sessionId: string;
  port: number;
  label: string | null;
  /** active, or why the link no longer works. */
  state: 'active' | 'expired' | 'revoked' | 'ended';
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  /** `kind:id` of the creator. */
  createdBy: string;
}
/** Create's answer: the view plus the link, shown this once. */
export interface PortLinkCreatedView extends PortLinkView {
  url: string;
  /** The path prefix an app behind the link sees as X-Forwarded-Prefix: `/p/<token>`. */
  prefix: string;
}
export interface PortLinkListView {
  links: PortLinkView[];
}

export function toPortLinkView(r: {
  id: string; sessionId: string; port: number; label: string | null; state: PortLinkView['state'];
  createdAt: number; expiresAt: number; revokedAt: number | null; createdBy: { kind: string; id: string };
}): PortLinkView {
  return {
    linkId: r.id,
    sessionId: r.sessionId,
    port: r.port,
    label: r.label,
    state: r.state,
    createdAt: iso(r.createdAt),
    expiresAt: iso(r.expiresAt),
    revokedAt: r.revokedAt === null ? null : iso(r.revokedAt),
    createdBy: `${r.createdBy.kind}:${r.createdBy.id}`,
  };
}

/** The path of a link: every request under it reaches the port with this prefix stripped. */
export function portLinkPrefix(token: string): string {
  return `/p/${token}`;
}

const Iso = z.string().describe('ISO-8601 time');
const viewShape = {
  linkId: z.string(),
  sessionId: z.string(),
  port: z.number().int(),
  label: z.string().nullable(),
  state: z.enum(['active', 'expired', 'revoked', 'ended']),
  createdAt: Iso,
  expiresAt: Iso,
  revokedAt: Iso.nullable(),
  createdBy: z.string(),
};
export const PortLinkViewSchema = z.strictObject(viewShape);
export const PortLinkCreatedViewSchema = z.strictObject({ ...viewShape, url: z.string().describe('open it in a browser; no token needed'), prefix: z.string() });
export const PortLinkListViewSchema = z.strictObject({ links: z.array(PortLinkViewSchema) });

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Out<S extends z.ZodType> = z.output<S>;
const _views: [
  Same<Out<typeof PortLinkViewSchema>, PortLinkView>,
  Same<Out<typeof PortLinkCreatedViewSchema>, PortLinkCreatedView>,
  Same<Out<typeof PortLinkListViewSchema>, PortLinkListView>,
] = [true, true, true];
void _views;
