import { UsageError, parse, printJson, println, table, type VerbContext } from './common.js';

const USAGE = `berth tenant create NAME [--json]
       berth tenant list [--json]`;

export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  if (sub === 'create') {
    const { values: v, positionals } = parse(argv, { json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
    const t = await ctx.client().tenants.create(positionals[0]!);
    if (v.json) printJson(ctx.io, t);
    else {
      println(ctx.io, `${t.id} ${t.name}`);
      println(ctx.io, `api key (shown once): ${t.apiKey}`);
    }
    return 0;
  }
  if (sub === 'list' || sub === 'ls') {
    const { values: v } = parse(argv, { json: { type: 'boolean' } }, USAGE, { max: 0 });
    const list = await ctx.client().tenants.list();
    if (v.json) printJson(ctx.io, { tenants: list });
    else if (list.length === 0) println(ctx.io, 'no tenants');
    else println(ctx.io, table([['ID', 'NAME', 'CREATED'], ...list.map((t) => [t.id, t.name, t.createdAt])]));
    return 0;
  }
  throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
}
