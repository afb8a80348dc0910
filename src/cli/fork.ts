import { parseCommand, printJson, println, type VerbContext } from './common.js';


export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('fork', '', ctx.argv);
  const sessions = await ctx.client().snapshots.fork(positionals[0]!, { count: v.count });
  if (v.json) printJson(ctx.io, { sessions: sessions.map((s) => s.toJSON()) });
  else for (const s of sessions) println(ctx.io, `${s.id} ${s.info.state} agent token: ${s.agentToken}`);
  return 0;
}
