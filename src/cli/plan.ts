import { readFile } from 'node:fs/promises';
import { UsageError, parseCommand, printJson, println, table, type VerbContext } from './common.js';


/** `berth plan set|show|clear`: binds a session to {"objective", "steps":[{"id","tool","arguments"}]}. */
export async function run(ctx: VerbContext): Promise<number> {
  const sub = ctx.sub;
  const client = () => ctx.client();
  if (sub === 'set') {
    const { values: v, positionals } = parseCommand('plan', 'set', ctx.argv);
    const file = positionals[1]!;
    let plan: unknown;
    try {
      plan = JSON.parse(await readFile(file, 'utf8'));
    } catch (e) {
      throw new UsageError(`cannot read a JSON plan from ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, 'berth plan set ID FILE.json');
    }
    const p = await client().plans.set(positionals[0]!, plan);
    if (v.json) printJson(ctx.io, p);
    else println(ctx.io, `plan set: ${p.plan?.steps.length ?? 0} steps`);
    return 0;
  }
  {
    const { values: v, positionals } = parseCommand('plan', sub === 'clear' ? 'clear' : 'show', ctx.argv);
    const p = sub === 'clear' ? await client().plans.clear(positionals[0]!) : await client().plans.get(positionals[0]!);
    if (v.json) printJson(ctx.io, p);
    else if (!p.plan) println(ctx.io, 'no plan');
    else {
      const cursor = p.state?.cursor ?? 0;
      println(ctx.io, `objective: ${p.plan.objective}`);
      println(ctx.io, table([['#', 'STEP', 'TOOL', 'TAKEN', ''], ...p.plan.steps.map((s, i) => [String(i + 1), s.id, s.tool, String(p.state?.consumed[s.id] ?? 0), i === cursor ? '← next' : s.repeatable ? 'repeatable' : ''])]));
    }
    return 0;
  }
}
