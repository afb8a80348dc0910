import { writeFile } from 'node:fs/promises';
import { UsageError, parseCommand, printJson, type VerbContext } from './common.js';


/** Exit status by decision: allow 0, deny 3, pending 4 (1 and 2 stay errors and usage). */
export const CALL_EXIT = { allow: 0, deny: 3, pending: 4 } as const;

/** `berth call ID TOOL --args JSON`: one tool call through the gate; prints the decision as JSON. */
export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('call', '', ctx.argv);
  let args: unknown = {};
  if (v.args !== undefined) {
    try {
      args = JSON.parse(v.args);
    } catch (e) {
      throw new UsageError(`--args: not JSON (${(e as Error).message})`, 'berth call ID TOOL --args JSON');
    }
  }
  const res = await ctx.client().tools.call(positionals[0]!, positionals[1]!, args, v.step !== undefined ? { step: v.step } : {});
  const shot = res.decision === 'allow' ? (res.result as { screenshot?: { data?: unknown } } | null)?.screenshot : undefined;
  if (v.screenshot !== undefined && shot && typeof shot.data === 'string') {
    await writeFile(v.screenshot, Buffer.from(shot.data, 'base64'));
    shot.data = `(written to ${v.screenshot})`;
  }
  printJson(ctx.io, res);
  return CALL_EXIT[res.decision];
}
