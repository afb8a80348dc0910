import { readFile } from 'node:fs/promises';
import { UsageError, parseCommand, printJson, println, table, type VerbContext } from './common.js';


/**
 * `berth tool define FILE.json`: adds (or replaces) an operator tool of the tenant:
 * {"name","description","inputSchema","outputSchema","risk","executor":{"kind":"command","argv":[…]}}.
 */
export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'define') {
    const { values: v, positionals } = parseCommand('tool', 'define', ctx.argv);
    const file = positionals[0]!;
    let def: unknown;
    try {
      def = JSON.parse(await readFile(file, 'utf8'));
    } catch (e) {
      throw new UsageError(`cannot read a JSON tool definition from ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, 'berth tool define FILE.json');
    }
    const t = await ctx.client().tools.define(def, { tenantId: v.tenant });
    if (v.json) printJson(ctx.io, t);
    else println(ctx.io, `tool ${t.name} defined (${t.risk})`);
    return 0;
  }
  {
    const { values: v } = parseCommand('tool', 'list', ctx.argv);
    const tools = await ctx.client().tools.definitions({ tenantId: v.tenant });
    if (v.json) printJson(ctx.io, { tools });
    else println(ctx.io, table([['NAME', 'RISK', 'KIND'], ...tools.map((t) => [t.name, t.risk, t.builtin ? 'built-in' : 'command'])]));
    return 0;
  }
}
