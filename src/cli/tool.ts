import { readFile } from 'node:fs/promises';
import { UsageError, parse, printJson, println, table, type VerbContext } from './common.js';

const USAGE = `berth tool define FILE.json [--tenant ID] [--json]
       berth tool list [--tenant ID] [--json]`;

/**
 * `berth tool define FILE.json`: adds (or replaces) an operator tool of the tenant:
 * {"name","description","inputSchema","outputSchema","risk","executor":{"kind":"command","argv":[…]}}.
 */
export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  const options = { tenant: { type: 'string' }, json: { type: 'boolean' } } as const;
  if (sub === 'define') {
    const { values: v, positionals } = parse(argv, options, USAGE, { min: 1, max: 1 });
    const file = positionals[0]!;
    let def: unknown;
    try {
      def = JSON.parse(await readFile(file, 'utf8'));
    } catch (e) {
      throw new UsageError(`cannot read a JSON tool definition from ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, USAGE);
    }
    const t = await ctx.client().tools.define(def, { tenantId: v.tenant });
    if (v.json) printJson(ctx.io, t);
    else println(ctx.io, `tool ${t.name} defined (${t.risk})`);
    return 0;
  }
  if (sub === 'list' || sub === 'ls') {
    const { values: v } = parse(argv, options, USAGE, { max: 0 });
    const tools = await ctx.client().tools.definitions({ tenantId: v.tenant });
    if (v.json) printJson(ctx.io, { tools });
    else println(ctx.io, table([['NAME', 'RISK', 'KIND'], ...tools.map((t) => [t.name, t.risk, t.builtin ? 'built-in' : 'command'])]));
    return 0;
  }
  throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
}
