import { numberFlag, parse, printJson, println, table, writeBytes, type VerbContext } from './common.js';
import * as proofs from './audit-proofs.js';

const USAGE = `berth audit [--session ID] [--after SEQ] [--limit N] [--json]
       berth audit export [--session ID] [--after SEQ]
       ${proofs.PROOF_USAGE}`;

/** Entries fetched per request while exporting (the server's largest page). */
const EXPORT_PAGE = 10_000;

export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.argv[0] === 'export') return exportLines(ctx);
  if (ctx.argv[0] === 'verify') return proofs.verify(ctx);
  if (ctx.argv[0] === 'key') return proofs.key(ctx);
  if (ctx.argv[0] === 'checkpoint') return proofs.checkpoint(ctx);
  if (ctx.argv[0] === 'prove') return proofs.prove(ctx);
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

/** `berth audit export`: every visible entry, oldest first, one JSON object per line (JSON Lines) on stdout. */
async function exportLines(ctx: VerbContext): Promise<number> {
  const { values: v } = parse(ctx.argv.slice(1), { session: { type: 'string' }, after: { type: 'string' } }, USAGE, { max: 0 });
  const client = ctx.client();
  let after = numberFlag('after', v.after, USAGE, true) ?? 0;
  for (;;) {
    const page = await client.audit.query({ sessionId: v.session, afterSeq: after, limit: EXPORT_PAGE });
    if (page.length === 0) return 0;
    const text = page.map((e) => JSON.stringify(e)).join('\n') + '\n';
    await writeBytes(ctx.io.stdout, Buffer.from(text));
    after = page[page.length - 1]!.seq;
    if (page.length < EXPORT_PAGE) return 0;
  }
}
