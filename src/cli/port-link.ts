/**
 * `berth port-link ID PORT [--ttl 1h] [--label L]`: a signed, expiring URL to a port inside the session
 * that a browser opens with no token (printed once: the server keeps only its hash). `berth port-link
 * list ID` shows a session's links and their state; `berth port-link revoke ID LINKID` ends one.
 */
import type { PortLinkView } from '../protocol/port-links.js';
import { UsageError, parseCommand, printJson, println, table, type VerbContext } from './common.js';
import { SPEC } from './commands.js';
import { commandUsage } from './usage.js';

const UNIT_S: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };
const MAX_TTL_S = 604_800;

/** `90s`, `30m`, `1h`, `7d` or a number of seconds → seconds, 1 s..7 d; else undefined. */
export function parseTtl(raw: string): number | undefined {
  const m = /^(\d{1,7})([smhd]?)$/.exec(raw.trim());
  if (!m) return undefined;
  const s = Number(m[1]) * UNIT_S[m[2] || 's']!;
  return s >= 1 && s <= MAX_TTL_S ? s : undefined;
}

const row = (l: PortLinkView): string[] => [l.linkId, String(l.port), l.state, l.expiresAt, l.label ?? ''];

export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'list') {
    const { values: v, positionals } = parseCommand('port-link', 'list', ctx.argv);
    const links = await (await ctx.client().sessions.get(positionals[0]!)).ports.links();
    if (v.json) printJson(ctx.io, { links });
    else if (links.length === 0) println(ctx.io, 'no port links');
    else println(ctx.io, table([['LINK', 'PORT', 'STATE', 'EXPIRES', 'LABEL'], ...links.map(row)]));
    return 0;
  }
  if (ctx.sub === 'revoke') {
    const { values: v, positionals } = parseCommand('port-link', 'revoke', ctx.argv);
    const link = await (await ctx.client().sessions.get(positionals[0]!)).ports.revokeLink(positionals[1]!);
    if (v.json) printJson(ctx.io, link);
    else println(ctx.io, `${link.linkId} revoked`);
    return 0;
  }
  const { values: v, positionals } = parseCommand('port-link', '', ctx.argv);
  const usage = commandUsage('port-link', '', SPEC['port-link'].commands['']);
  const rawPort = positionals[1]!;
  const port = /^\d{1,5}$/.test(rawPort) ? Number(rawPort) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new UsageError(`PORT: expected an integer from 1 to 65535, got ${JSON.stringify(rawPort)}`, usage);
  const ttlS = v.ttl === undefined ? undefined : parseTtl(v.ttl);
  if (v.ttl !== undefined && ttlS === undefined) throw new UsageError(`--ttl: expected 90s, 30m, 1h, 7d or seconds, from 1 s to 7 days, got ${JSON.stringify(v.ttl)}`, usage);
  const s = await ctx.client().sessions.get(positionals[0]!);
  const link = await s.ports.link(port, { ...(ttlS === undefined ? {} : { ttlS }), ...(v.label === undefined ? {} : { label: v.label }) });
  if (v.json) printJson(ctx.io, link);
  else println(ctx.io, link.url);
  return 0;
}
