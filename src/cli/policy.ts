import { readFile } from 'node:fs/promises';
import { UsageError, parseCommand, printJson, println, type VerbContext } from './common.js';


/** `berth policy set|show`: the tenant's Cedar policy. A policy that does not validate is refused and the old one kept. */
export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'set') {
    const { values: v, positionals } = parseCommand('policy', 'set', ctx.argv);
    const file = positionals[0]!;
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (e) {
      throw new UsageError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, 'berth policy set FILE.cedar');
    }
    const p = await ctx.client().policy.set(text, { tenantId: v.tenant });
    if (v.json) printJson(ctx.io, p);
    else {
      println(ctx.io, `policy version ${p.version} set for ${p.tenantId} (digest ${p.digest.slice(0, 12)})`);
      for (const w of p.warnings) ctx.io.stderr.write(`warning: ${w}\n`);
    }
    return 0;
  }
  {
    const { values: v } = parseCommand('policy', 'show', ctx.argv);
    const p = await ctx.client().policy.get({ tenantId: v.tenant });
    if (v.json) printJson(ctx.io, p);
    else ctx.io.stdout.write(p.text.endsWith('\n') ? p.text : `${p.text}\n`);
    return 0;
  }
}
