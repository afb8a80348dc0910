import { UsageError, kvFlags, numberFlag, parse, writeBytes, type VerbContext } from './common.js';

const USAGE = 'berth exec ID [--cwd DIR] [--env K=V]… [--timeout MS] -- CMD [ARGS…]';

/** Exit status when --timeout killed the command (as timeout(1) does). */
export const TIMEOUT_EXIT = 124;

/**
 * Runs a command in a session: stdout and stderr stream through as bytes, stdin is passed through when it
 * is not a terminal, and the exit status is the command's. The first Ctrl-C is forwarded as SIGINT; a
 * second one drops the connection (which kills the command).
 */
export async function run(ctx: VerbContext): Promise<number> {
  const dd = ctx.argv.indexOf('--');
  const head = dd >= 0 ? ctx.argv.slice(0, dd) : ctx.argv;
  const { values: v, positionals } = parse(
    head,
    { cwd: { type: 'string' }, env: { type: 'string', multiple: true }, timeout: { type: 'string' } },
    USAGE,
    { min: 1 },
  );
  const [id, ...rest] = positionals;
  const argv = dd >= 0 ? [...rest, ...ctx.argv.slice(dd + 1)] : rest;
  if (argv.length === 0) throw new UsageError('missing command', USAGE);
  const timeoutMs = numberFlag('timeout', v.timeout, USAGE, true);

  const { io } = ctx;
  const session = await ctx.client().sessions.get(id!);
  const ac = new AbortController();
  const ex = await session.exec(argv, {
    cwd: v.cwd,
    env: kvFlags('env', v.env, USAGE),
    timeoutMs,
    stdin: io.stdin.isTTY ? undefined : io.stdin,
    signal: ac.signal,
  });

  let interrupts = 0;
  const onSigint = () => {
    interrupts++;
    if (interrupts === 1) void ex.kill('SIGINT').catch(() => ac.abort());
    else ac.abort();
  };
  process.on('SIGINT', onSigint);
  try {
    for await (const ev of ex) await writeBytes(ev.type === 'stdout' ? io.stdout : io.stderr, ev.data);
    const exit = await ex.wait();
    if (exit.timedOut) {
      io.stderr.write(`berth: command timed out after ${timeoutMs} ms\n`);
      return TIMEOUT_EXIT;
    }
    return exit.code;
  } catch (e) {
    if (ac.signal.aborted) return 130;
    throw e;
  } finally {
    process.off('SIGINT', onSigint);
  }
}
