import { parseCommand, printJson, println, type VerbContext } from './common.js';


/** `berth breaker reset ID`: closes a tripped breaker and resumes the session it paused. */
export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('breaker', 'reset', ctx.argv);
  const g = await ctx.client().gate.resetBreaker(positionals[0]!);
  if (v.json) printJson(ctx.io, g);
  else println(ctx.io, `${g.sessionId}: breaker closed`);
  return 0;
}
