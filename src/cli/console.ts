import { spawn } from 'node:child_process';
import { parseCommand, printJson, println, type VerbContext } from './common.js';

/**
 * `berth console [--open]`: a one-time sign-in link to the web console (valid 60 s, exchanged for an
 * HttpOnly cookie on first use; the code is in the fragment, so it reaches neither a server log nor a Referer).
 */
export async function run(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('console', '', ctx.argv);
  const link = await ctx.client().console.link();
  if (v.json) printJson(ctx.io, link);
  else println(ctx.io, `${link.url}\n(one-time link, valid until ${link.expiresAt})`);
  if (v.open) {
    const opener = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open';
    const child = spawn(opener, [link.url], { stdio: 'ignore', detached: true });
    child.on('error', () => println(ctx.io, `(could not run ${opener}; open the link above yourself)`));
    child.unref();
  }
  return 0;
}
