import { numberFlag, parse, printJson, println, table, type VerbContext } from './common.js';

const USAGE = `berth audit [--session ID] [--after SEQ] [--limit N] [--json]
       berth audit verify [--json]`;

export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.argv[0] === 'verify') {
    const { values: v } = parse(ctx.argv.slice(1), { json: { type: 'boolean' } }, USAGE, { max: 0 });
    const r = await ctx.client().audit.verify();
    if (v.json) printJson(ctx.io, r);
    else if (r.ok) println(ctx.io, `ok: ${r.entries} entries, head ${r.headHash}`);
    if (!r.ok) {
      ctx.io.stderr.write(`berth: audit chain broken at seq ${r.firstBadSeq} (${r.problem})\n`);
      return 1;
    }
    return 0;
  }
  const { values: v } = parse(
    ctx.argv,
    { session: { type: 'string' }, after: { type: 'string' }, limit: { type: 'string' }, json: { type: 'boolean' } },
    USAGE,
    { max: 0 },
  );
  const entries = await ctx.client().audit.query({
    sessionId: v.session,
    afterSeq: numberFlag('after', v.after, USAGE, true),
    limit: numberFlag('limit', v.limit, USAGE, true),
  });
  if (v.json) printJson(ctx.io, { entries });
  else if (entries.length > 0) {
    println(ctx.io, table([['SEQ', 'TIME', 'PRINCIPAL', 'ACTION', 'OUTCOME', 'SESSION'], ...entries.map((e) => [String(e.seq), e.ts, `${e.principal.kind}:${e.principal.id}`, e.action, e.outcome, e.sessionId ?? '-'])]));
  }
  return 0;
}
