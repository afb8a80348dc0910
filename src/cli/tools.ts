import { parseCommand, printJson, println, table, type VerbContext } from './common.js';


/** `berth tools ID`: the tools a session has; with an agent token, exactly what that agent may call. */
export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('tools', '', ctx.argv);
  const tools = await ctx.client().tools.list(positionals[0]!);
  if (v.json) printJson(ctx.io, { tools });
  else if (tools.length === 0) println(ctx.io, 'no tools');
  else println(ctx.io, table([['NAME', 'RISK', 'DESCRIPTION'], ...tools.map((t) => [t.name, t.risk, t.description.split('. ')[0] ?? ''])]));
  return 0;
}
