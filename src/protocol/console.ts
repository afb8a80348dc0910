/**
 * Wire types and schemas of the console's routes (issue 10): control leases, policy validation, sign-in
 * links and the cookie session. Views are built field by field in the server; schemas are the ones the
 * routes parse with and the OpenAPI table documents.
 */
import * as z from 'zod';

// ---- control lease ----

export interface ControlView {
  sessionId: string;
  held: boolean;
  /** Who holds it (`operator:ten_… (console cs_…)`), null when nobody does. */
  holder: string | null;
  since: string | null;
  lastActivityAt: string | null;
  /** When it lapses unless its holder acts again. */
  expiresAt: string | null;
}

export const ControlViewSchema = z.strictObject({
  sessionId: z.string(),
  held: z.boolean(),
  holder: z.string().nullable(),
  since: z.string().nullable(),
  lastActivityAt: z.string().nullable(),
  expiresAt: z.string().nullable(),
});

export const ReleaseControlQuerySchema = z.strictObject({
  force: z
    .enum(['true', 'false'])
    .optional()
    .transform((v) => v === 'true')
    .describe('end a lease someone else holds (default false: only the holder hands back)'),
});

// ---- policy validation ----

export interface PolicyValidationView {
  ok: boolean;
  errors: string[];
  warnings: string[];
}
export const PolicyValidationViewSchema = z.strictObject({ ok: z.boolean(), errors: z.array(z.string()), warnings: z.array(z.string()) });

// ---- sign-in ----

export interface ConsoleLinkView {
  /** Open it once within `expiresAt`; the code sits in the fragment, which never reaches a server or a Referer. */
  url: string;
  expiresAt: string;
}
export const ConsoleLinkViewSchema = z.strictObject({ url: z.string(), expiresAt: z.string() });
export const ConsoleLinkBodySchema = z.strictObject({
  baseUrl: z.string().url().max(2048).optional().describe('the console URL to put in the link (default: the URL this request came to)'),
});

/** A one-time code from a sign-in link, a token typed into the form, or a watch-only link's token. */
export const ConsoleSignInBodySchema = z.union([
  z.strictObject({ code: z.string().min(1).max(256) }),
  z.strictObject({ token: z.string().min(1).max(512) }),
  z.strictObject({ watch: z.string().min(1).max(256) }),
]);

// ---- watch-only links ----

export interface WatchLinkView {
  linkId: string;
  sessionId: string;
  label: string | null;
  /** Who made it (`operator:ten_…`). */
  createdBy: string;
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  /** active until it expires or is revoked. */
  state: 'active' | 'expired' | 'revoked';
}
export const WatchLinkViewSchema = z.strictObject({
  linkId: z.string(),
  sessionId: z.string(),
  label: z.string().nullable(),
  createdBy: z.string(),
  createdAt: z.string(),
  expiresAt: z.string(),
  revokedAt: z.string().nullable(),
  state: z.enum(['active', 'expired', 'revoked']),
});
export interface WatchLinkListView {
  links: WatchLinkView[];
}
export const WatchLinkListViewSchema = z.strictObject({ links: z.array(WatchLinkViewSchema) });

/** What POST …/watch-links answers: the link (its token is in `url` and shown only this once). */
export interface WatchLinkCreatedView {
  linkId: string;
  /** Opens the console read-only on this one session; the token sits in the fragment (never sent to a server or a Referer). */
  url: string;
  expiresAt: string;
}
export const WatchLinkCreatedViewSchema = z.strictObject({ linkId: z.string(), url: z.string(), expiresAt: z.string() });

export const WatchLinkCreateBodySchema = z.strictObject({
  ttlS: z.number().int().min(60).max(30 * 86_400).optional().describe('seconds the link works (default 3600, 60 to 2592000)'),
  label: z.string().max(200).optional().describe('shown in the list, e.g. who it was shared with'),
  baseUrl: z.string().url().max(2048).optional().describe('the console URL to put in the link (default: the URL this request came to)'),
});

export interface ConsoleMeView {
  /** `operator:ten_…` or `root:root`. */
  principal: string;
  kind: string;
  tenantId: string | null;
  /** The console session's short handle (`cs_…`), as lease holders and audit entries name it. */
  handle: string;
  idleLogoffS: number;
  /** Through a watch-only link (kind `watcher`): the one session this console may show; else null. */
  watchSessionId: string | null;
}
export const ConsoleMeViewSchema = z.strictObject({
  principal: z.string(),
  kind: z.string(),
  tenantId: z.string().nullable(),
  handle: z.string(),
  idleLogoffS: z.number().int(),
  watchSessionId: z.string().nullable(),
});

export { CONSOLE_BACKGROUND_HEADER, CONSOLE_COOKIE, CONSOLE_CSRF_HEADER } from './console-names.js';
