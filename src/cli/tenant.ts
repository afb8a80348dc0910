import { UsageError, parseCommand, printJson, println, table, type VerbContext } from './common.js';


export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'create') {
    const { values: v, positionals } = parseCommand('tenant', 'create', ctx.argv);
    const t = await ctx.client().tenants.create(positionals[0]!);
    if (v.json) printJson(ctx.io, t);
    else {
      println(ctx.io, `${t.id} ${t.name}`);
      println(ctx.io, `api key (shown once): ${t.apiKey}`);
    }
    return 0;
  }
  {
    const { values: v } = parseCommand('tenant', 'list', ctx.argv);
    const list = await ctx.client().tenants.list();
    if (v.json) printJson(ctx.io, { tenants: list });
    else if (list.length === 0) println(ctx.io, 'no tenants');
    else println(ctx.io, table([['ID', 'NAME', 'CREATED'], ...list.map((t) => [t.id, t.name, t.createdAt])]));
    return 0;
  }
}
