import type { ControlView } from '../sdk/index.js';
import { parseCommand, printJson, println, type VerbContext } from './common.js';

function show(ctx: VerbContext, c: ControlView, json: boolean | undefined): void {
  if (json) return printJson(ctx.io, c);
  println(ctx.io, c.held ? `${c.sessionId}: held by ${c.holder} since ${c.since} (lapses at ${c.expiresAt} without activity)` : `${c.sessionId}: the agent has control`);
}

/** `berth control take|release|show ID`: a session's control lease; the agent's calls answer human_control while it is held. */
export async function run(ctx: VerbContext): Promise<number> {
  const client = ctx.client();
  if (ctx.sub === 'take') {
    const { values: v, positionals } = parseCommand('control', 'take', ctx.argv);
    show(ctx, await client.control.take(positionals[0]!), v.json);
  } else if (ctx.sub === 'release') {
    const { values: v, positionals } = parseCommand('control', 'release', ctx.argv);
    show(ctx, await client.control.release(positionals[0]!, { force: v.force ?? false }), v.json);
  } else {
    const { values: v, positionals } = parseCommand('control', 'show', ctx.argv);
    show(ctx, await client.control.get(positionals[0]!), v.json);
  }
  return 0;
}
