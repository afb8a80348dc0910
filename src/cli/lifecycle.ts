import { parseCommand, printJson, println, type Verb } from './common.js';

export type LifecycleVerb = 'pause' | 'resume' | 'hibernate' | 'wake';

/** `berth pause|resume|hibernate|wake ID [--json]`: one verb, one engine transition. */
export function lifecycle(verb: LifecycleVerb): Verb {
  return async (ctx) => {
    const { values: v, positionals } = parseCommand(verb, '', ctx.argv);
    const s = await ctx.client().sessions.get(positionals[0]!);
    const view = await s[verb]();
    if (v.json) printJson(ctx.io, view);
    else println(ctx.io, `${view.id} ${view.state}`);
    return 0;
  };
}
