import { parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';
import * as proofs from './audit-proofs.js';

/** Entries fetched per request while exporting (the server's largest page). */
const EXPORT_PAGE = 10_000;

export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'export') return exportLines(ctx);
  if (ctx.sub === 'verify') return proofs.verify(ctx);
  if (ctx.sub === 'key') return proofs.key(ctx);
  if (ctx.sub === 'checkpoint') return proofs.checkpoint(ctx);
  if (ctx.sub === 'prove') return proofs.prove(ctx);
  const { values: v } = parseCommand('audit', '', ctx.argv);
  const entries = await ctx.client().audit.query({
    sessionId: v.session,
    afterSeq: v.after,
    limit: v.limit,
  });
  if (v.json) printJson(ctx.io, { entries });
  else if (entries.length > 0) {
    println(ctx.io, table([['SEQ', 'TIME', 'PRINCIPAL', 'ACTION', 'OUTCOME', 'SESSION'], ...entries.map((e) => [String(e.seq), e.ts, `${e.principal.kind}:${e.principal.id}`, e.action, e.outcome, e.sessionId ?? '-'])]));
  }
  return 0;
}

/** `berth audit export`: every visible entry, oldest first, one JSON object per line (JSON Lines) on stdout. */
async function exportLines(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('audit', 'export', ctx.argv);
  const client = ctx.client();
  let after = v.after ?? 0;
  for (;;) {
    const page = await client.audit.query({ sessionId: v.session, afterSeq: after, limit: EXPORT_PAGE });
    if (page.length === 0) return 0;
    const text = page.map((e) => JSON.stringify(e)).join('\n') + '\n';
    await writeBytes(ctx.io.stdout, Buffer.from(text));
    after = page[page.length - 1]!.seq;
    if (page.length < EXPORT_PAGE) return 0;
  }
}
