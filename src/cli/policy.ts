import { readFile } from 'node:fs/promises';
import { UsageError, parse, printJson, println, type VerbContext } from './common.js';

const USAGE = `berth policy set FILE.cedar [--tenant ID] [--json]
       berth policy show [--tenant ID] [--json]`;

/** `berth policy set|show`: the tenant's Cedar policy. A policy that does not validate is refused and the old one kept. */
export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  const options = { tenant: { type: 'string' }, json: { type: 'boolean' } } as const;
  if (sub === 'set') {
    const { values: v, positionals } = parse(argv, options, USAGE, { min: 1, max: 1 });
    const file = positionals[0]!;
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (e) {
      throw new UsageError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, USAGE);
    }
    const p = await ctx.client().policy.set(text, { tenantId: v.tenant });
    if (v.json) printJson(ctx.io, p);
    else {
      println(ctx.io, `policy version ${p.version} set for ${p.tenantId} (digest ${p.digest.slice(0, 12)})`);
      for (const w of p.warnings) ctx.io.stderr.write(`warning: ${w}\n`);
    }
    return 0;
  }
  if (sub === 'show' || sub === 'get') {
    const { values: v } = parse(argv, options, USAGE, { max: 0 });
    const p = await ctx.client().policy.get({ tenantId: v.tenant });
    if (v.json) printJson(ctx.io, p);
    else ctx.io.stdout.write(p.text.endsWith('\n') ? p.text : `${p.text}\n`);
    return 0;
  }
  throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
}
