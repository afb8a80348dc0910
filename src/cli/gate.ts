import type { GateSettingsBody, GateView } from '../sdk/index.js';
import { parseCommand, printJson, println, table, type VerbContext } from './common.js';


function show(ctx: VerbContext, g: GateView, json: boolean | undefined): void {
  if (json) return printJson(ctx.io, g);
  const b = g.breaker;
  println(
    ctx.io,
    table([
      ['tools:', g.tools.join(', ') || '-'],
      ['egress allow:', g.egressAllow.join(', ') || '- (no egress)'],
      ['egress cidrs:', g.egressAllowCidr.join(', ') || '-'],
      ['approval ttl:', g.approvalTtlS ? `${g.approvalTtlS} s` : 'never expires'],
      ['breaker:', `${b.open ? `OPEN (${b.reason ?? b.trip})` : 'closed'}; trips after ${b.failures} identical failures or ${b.perMinute} calls/min`],
      ['calls:', String(g.calls)],
    ]),
  );
}

/** `berth gate set|show`: a session's gate settings. --http-allow replaces the whole list (repeat it per host). */
export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'show') {
    const { values: v, positionals } = parseCommand('gate', 'show', ctx.argv);
    show(ctx, await ctx.client().gate.get(positionals[0]!), v.json);
    return 0;
  }
  const { values: v, positionals } = parseCommand('gate', 'set', ctx.argv);
  const id = positionals[0]!;
  const body: GateSettingsBody = {};
  const failures = v['breaker-failures'];
  const perMinute = v['breaker-per-minute'];
  if (failures !== undefined || perMinute !== undefined) body.breaker = { ...(failures !== undefined ? { failures } : {}), ...(perMinute !== undefined ? { perMinute } : {}) };
  if (v['http-allow']) body.httpAllow = v['http-allow'].flatMap((h) => h.split(',')).filter(Boolean);
  if (v['egress-allow']) body.egressAllow = v['egress-allow'].flatMap((h) => h.split(',')).filter(Boolean);
  if (v['egress-allow-cidr']) body.egressAllowCidr = v['egress-allow-cidr'].flatMap((h) => h.split(',')).filter(Boolean);
  const ttl = v['approval-ttl'];
  if (ttl !== undefined) body.approvalTtlS = ttl;
  const client = ctx.client();
  let g: GateView | undefined;
  if (v.tools !== undefined) g = await client.tools.install(id, v.tools.split(',').filter(Boolean));
  if (Object.keys(body).length > 0 || !g) g = await client.gate.set(id, body);
  show(ctx, g, v.json);
  return 0;
}
