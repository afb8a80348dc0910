import { UsageError, parseCommand, writeBytes, type VerbContext } from './common.js';
import { commandUsage } from './usage.js';
import { SPEC } from './commands.js';

/** Exit status when --timeout killed the command (as timeout(1) does). */
export const TIMEOUT_EXIT = 124;

/**
 * Runs a command in a session: stdout and stderr stream through as bytes, stdin is passed through when it
 * is not a terminal, and the exit status is the command's. The first Ctrl-C is forwarded as SIGINT; a
 * second one drops the connection (which kills the command).
 *
 * --json prints the events as JSON lines on stdout, in the form of the HTTP exec stream (ExecStreamLine):
 * {"type":"started","execId","sessionId"}, {"type":"stdout"|"stderr","data":base64}, {"type":"exit",…}.
 *
 * --background starts the command and returns at once (exit 0), printing its execId (with --json
 * {"execId","pid"}); it runs on by itself and its output stays in the sandbox (`berth logs ID EXECID`).
 */
export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals, rest } = parseCommand('exec', '', ctx.argv);
  const [id, ...more] = positionals;
  const argv = [...more, ...rest];
  if (argv.length === 0) throw new UsageError('berth exec: missing command (after --)', commandUsage('exec', '', SPEC.exec.commands['']));
  const timeoutMs = v.timeout;

  const { io } = ctx;
  const session = await ctx.client().sessions.get(id!);
  if (v.background) {
    const p = await session.exec(argv, { cwd: v.cwd, env: v.env, timeoutMs, background: true });
    if (v.json) io.stdout.write(`${JSON.stringify({ execId: p.execId, pid: p.pid })}\n`);
    else io.stdout.write(`${p.execId}\n`);
    return 0;
  }
  const ac = new AbortController();
  const ex = await session.exec(argv, {
    cwd: v.cwd,
    env: v.env,
    timeoutMs,
    stdin: io.stdin.isTTY ? undefined : io.stdin,
    signal: ac.signal,
  });
  const line = (o: object) => writeBytes(io.stdout, Buffer.from(`${JSON.stringify(o)}\n`));
  if (v.json) await line({ type: 'started', execId: ex.execId, sessionId: ex.sessionId });

  let interrupts = 0;
  const onSigint = () => {
    interrupts++;
    if (interrupts === 1) void ex.kill('SIGINT').catch(() => ac.abort());
    else ac.abort();
  };
  process.on('SIGINT', onSigint);
  try {
    for await (const ev of ex) {
      if (v.json) await line({ type: ev.type, data: Buffer.from(ev.data).toString('base64') });
      else await writeBytes(ev.type === 'stdout' ? io.stdout : io.stderr, ev.data);
    }
    const exit = await ex.wait();
    if (v.json) await line({ type: 'exit', code: exit.code, signal: exit.signal, timedOut: exit.timedOut });
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
