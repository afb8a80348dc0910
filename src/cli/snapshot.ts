import type { SnapshotView } from '../protocol/types.js';
import { parseCommand, printJson, println, table, type VerbContext } from './common.js';


function line(s: SnapshotView): string {
  return `${s.snapshotId} of ${s.sessionId}${s.name ? ` "${s.name}"` : ''} (${s.kind}, ${s.sizeBytes} bytes, ${s.createdAt})`;
}

export async function run(ctx: VerbContext): Promise<number> {
  const first = ctx.sub;
  if (first === 'list') {
    const { values: v } = parseCommand('snapshot', 'list', ctx.argv);
    const list = await ctx.client().snapshots.list({ sessionId: v.session });
    if (v.json) printJson(ctx.io, { snapshots: list });
    else if (list.length === 0) println(ctx.io, 'no snapshots');
    else println(ctx.io, table([['SNAPSHOT', 'SESSION', 'NAME', 'KIND', 'BYTES', 'CREATED'], ...list.map((s) => [s.snapshotId, s.sessionId, s.name ?? '', s.kind, String(s.sizeBytes), s.createdAt])]));
    return 0;
  }
  if (first === 'show' || first === 'rm') {
    const { values: v, positionals } = parseCommand('snapshot', first, ctx.argv);
    const id = positionals[0]!;
    if (first === 'show') {
      const s = await ctx.client().snapshots.get(id);
      if (v.json) printJson(ctx.io, s);
      else println(ctx.io, line(s));
    } else {
      await ctx.client().snapshots.delete(id);
      if (v.json) printJson(ctx.io, { ok: true, snapshotId: id });
      else println(ctx.io, `${id} deleted`);
    }
    return 0;
  }
  const { values: v, positionals } = parseCommand('snapshot', '', ctx.argv);
  const s = await ctx.client().sessions.get(positionals[0]!);
  const snap = await s.snapshot({ name: v.name });
  if (v.json) printJson(ctx.io, snap);
  else println(ctx.io, line(snap));
  return 0;
}
