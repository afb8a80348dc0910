import { numberFlag, parse, printJson, println, type VerbContext } from './common.js';

const USAGE = 'berth fork SNAPSHOT [--count N] [--json]';

export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parse(ctx.argv, { count: { type: 'string' }, json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
  const sessions = await ctx.client().snapshots.fork(positionals[0]!, { count: numberFlag('count', v.count, USAGE, true) });
  if (v.json) printJson(ctx.io, { sessions: sessions.map((s) => s.toJSON()) });
  else for (const s of sessions) println(ctx.io, `${s.id} ${s.info.state} agent token: ${s.agentToken}`);
  return 0;
}
