import type { VerbContext } from './common.js';

/** `berth serve`: the server's own composition root parses the flags and runs until a signal. */
export async function run(ctx: VerbContext): Promise<number> {
  const { serveMain } = await import('../server/main.js');
  await serveMain(ctx.argv);
  return 0;
}
