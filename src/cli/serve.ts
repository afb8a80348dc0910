import { parseCommand, type VerbContext } from './common.js';

/**
 * `berth serve`: flags are checked against the table (so --help, completion and bad values behave as for
 * every verb); the server's composition root then reads them with the environment and runs until a signal.
 */
export async function run(ctx: VerbContext): Promise<number> {
  parseCommand('serve', '', ctx.argv);
  const { serveMain } = await import('../server/main.js');
  await serveMain(ctx.argv);
  return 0;
}
