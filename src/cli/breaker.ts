import { UsageError, parse, printJson, println, type VerbContext } from './common.js';

const USAGE = 'berth breaker reset SESSION_ID [--json]';

/** `berth breaker reset ID`: closes a tripped breaker and resumes the session it paused. */
export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  if (sub !== 'reset') throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
  const { values: v, positionals } = parse(argv, { json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
  const g = await ctx.client().gate.resetBreaker(positionals[0]!);
  if (v.json) printJson(ctx.io, g);
  else println(ctx.io, `${g.sessionId}: breaker closed`);
  return 0;
}
