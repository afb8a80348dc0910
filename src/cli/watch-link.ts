import { InvalidArgumentError } from '../core/index.js';
import type { WatchLinkView } from '../sdk/index.js';
import { parseCommand, printJson, println, type VerbContext } from './common.js';

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** '90s', '30m', '1h', '7d' → seconds. */
function ttlSeconds(text: string): number {
  const m = /^(\d+)(s|m|h|d)$/.exec(text.trim());
  if (!m) throw new InvalidArgumentError(`--ttl: expected a duration such as 30m, 1h or 7d, got ${JSON.stringify(text)}`, { details: { field: 'ttl' } });
  return Number(m[1]) * (UNITS[m[2] as string] as number);
}

function line(l: WatchLinkView): string {
  return `${l.linkId}  ${l.state.padEnd(7)}  expires ${l.expiresAt}${l.label ? `  ${l.label}` : ''}  (by ${l.createdBy})`;
}

/**
 * `berth watch-link create|list|revoke`: watch-only links to one session's console view (read-only, for
 * whoever opens them, until they expire or are revoked).
 */
export async function run(ctx: VerbContext): Promise<number> {
  const client = ctx.client();
  if (ctx.sub === 'create') {
    const { values: v, positionals } = parseCommand('watch-link', 'create', ctx.argv);
    const link = await client.console.createWatchLink(positionals[0]!, { ...(v.ttl ? { ttlS: ttlSeconds(v.ttl) } : {}), ...(v.label ? { label: v.label } : {}) });
    if (v.json) printJson(ctx.io, link);
    else println(ctx.io, `${link.url}\n(watch-only link ${link.linkId}, valid until ${link.expiresAt}; revoke: berth watch-link revoke ${positionals[0]} ${link.linkId})`);
  } else if (ctx.sub === 'revoke') {
    const { values: v, positionals } = parseCommand('watch-link', 'revoke', ctx.argv);
    const l = await client.console.revokeWatchLink(positionals[0]!, positionals[1]!);
    if (v.json) printJson(ctx.io, l);
    else println(ctx.io, `revoked ${l.linkId}`);
  } else {
    const { values: v, positionals } = parseCommand('watch-link', 'list', ctx.argv);
    const links = await client.console.watchLinks(positionals[0]!);
    if (v.json) printJson(ctx.io, { links });
    else println(ctx.io, links.length ? links.map(line).join('\n') : 'no watch links');
  }
  return 0;
}
