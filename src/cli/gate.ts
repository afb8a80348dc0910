import type { GateSettingsBody, GateView } from '../sdk/index.js';
import { UsageError, numberFlag, parse, printJson, println, table, type VerbContext } from './common.js';

const USAGE = `berth gate set SESSION_ID [--http-allow HOST]… [--breaker-failures N] [--breaker-per-minute M] [--approval-ttl S] [--tools NAME[,NAME…]] [--json]
       berth gate show SESSION_ID [--json]`;

function show(ctx: VerbContext, g: GateView, json: boolean | undefined): void {
  if (json) return printJson(ctx.io, g);
  const b = g.breaker;
  println(
    ctx.io,
    table([
      ['tools:', g.tools.join(', ') || '-'],
      ['http allow:', g.httpAllow.join(', ') || '-'],
      ['approval ttl:', g.approvalTtlS ? `${g.approvalTtlS} s` : 'never expires'],
      ['breaker:', `${b.open ? `OPEN (${b.reason ?? b.trip})` : 'closed'}; trips after ${b.failures} identical failures or ${b.perMinute} calls/min`],
      ['calls:', String(g.calls)],
    ]),
  );
}

/** `berth gate set|show`: a session's gate settings. --http-allow replaces the whole list (repeat it per host). */
export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  if (sub === 'show' || sub === 'get') {
    const { values: v, positionals } = parse(argv, { json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
    show(ctx, await ctx.client().gate.get(positionals[0]!), v.json);
    return 0;
  }
  if (sub !== 'set') throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
  const { values: v, positionals } = parse(
    argv,
    {
      'http-allow': { type: 'string', multiple: true },
      'breaker-failures': { type: 'string' },
      'breaker-per-minute': { type: 'string' },
      'approval-ttl': { type: 'string' },
      tools: { type: 'string' },
      json: { type: 'boolean' },
    },
    USAGE,
    { min: 1, max: 1 },
  );
  const id = positionals[0]!;
  const body: GateSettingsBody = {};
  const failures = numberFlag('breaker-failures', v['breaker-failures'], USAGE, true);
  const perMinute = numberFlag('breaker-per-minute', v['breaker-per-minute'], USAGE, true);
  if (failures !== undefined || perMinute !== undefined) body.breaker = { ...(failures !== undefined ? { failures } : {}), ...(perMinute !== undefined ? { perMinute } : {}) };
  if (v['http-allow']) body.httpAllow = v['http-allow'].flatMap((h) => h.split(',')).filter(Boolean);
  const ttl = numberFlag('approval-ttl', v['approval-ttl'], USAGE, true);
  if (ttl !== undefined) body.approvalTtlS = ttl;
  const client = ctx.client();
  let g: GateView | undefined;
  if (v.tools !== undefined) g = await client.tools.install(id, v.tools.split(',').filter(Boolean));
  if (Object.keys(body).length > 0 || !g) g = await client.gate.set(id, body);
  show(ctx, g, v.json);
  return 0;
}
