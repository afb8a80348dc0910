/**
 * `berth shell ID [-- CMD…]`: an interactive terminal in the local one (raw mode, TERM passed, size from
 * the local terminal and again on SIGWINCH, the remote exit status as ours). `berth terminal list | kill |
 * record`. Thin: parse, call the SDK, report.
 */
import { SIGNALS } from '../protocol/schemas.js';
import type { Terminal } from '../sdk/terminals.js';
import { UsageError, parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';
import { SPEC } from './commands.js';
import { localTerm } from './env.js';
import { commandUsage } from './usage.js';

export async function shell(ctx: VerbContext): Promise<number> {
  const { values: v, positionals, rest } = parseCommand('shell', '', ctx.argv);
  if (v.watch && !v.attach) throw new UsageError('--watch: only with --attach TID', commandUsage('shell', '', SPEC.shell.commands['']));
  if (v.attach && rest.length) throw new UsageError('--attach: a command cannot be given for an existing terminal', commandUsage('shell', '', SPEC.shell.commands['']));
  const out = process.stdout;
  const input = process.stdin;
  const size = () => ({ cols: out.isTTY && out.columns ? out.columns : 80, rows: out.isTTY && out.rows ? out.rows : 24 });
  const s = await ctx.client().sessions.get(positionals[0]!);
  const env: Record<string, string> = { ...(v.env ?? {}) };
  const localType = localTerm();
  if (localType && env.TERM === undefined) env.TERM = localType;
  const term: Terminal = v.attach
    ? await s.terminals.attach(v.attach, { mode: v.watch ? 'watch' : 'control' })
    : await s.terminals.create({ ...size(), env, ...(v.cwd ? { cwd: v.cwd } : {}), ...(rest.length ? { command: rest } : {}) });
  const raw = input.isTTY === true;
  if (raw) input.setRawMode(true);
  const onData = (b: Buffer) => {
    try {
      term.write(b);
    } catch {
      // ended: the exit comes through wait()
    }
  };
  const onWinch = () => {
    const { cols, rows } = size();
    if (term.role === 'controller') term.resize(cols, rows);
  };
  input.on('data', onData);
  input.resume();
  process.on('SIGWINCH', onWinch);
  if (v.attach && term.role === 'controller') onWinch();
  try {
    const pump = (async () => {
      for await (const chunk of term) await writeBytes(ctx.io.stdout, chunk);
    })();
    let code: number;
    try {
      const exit = await term.wait();
      code = exit.code;
    } catch (e) {
      await pump.catch(() => undefined);
      if (raw) input.setRawMode(false);
      ctx.io.stderr.write(`\r\nberth: ${(e as Error).message}; reattach: berth shell ${s.id} --attach ${term.termId}\n`);
      return 255;
    }
    await pump;
    for (const e of term.errors) ctx.io.stderr.write(`berth: ${e.message}\n`);
    return code;
  } finally {
    process.off('SIGWINCH', onWinch);
    input.off('data', onData);
    input.pause();
    if (raw) input.setRawMode(false);
  }
}

export async function terminal(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'list') {
    const { values: v, positionals } = parseCommand('terminal', 'list', ctx.argv);
    const s = await ctx.client().sessions.get(positionals[0]!);
    const list = await s.terminals.list();
    if (v.json) {
      printJson(ctx.io, list);
      return 0;
    }
    const rows = [['TID', 'PID', 'STATE', 'EXIT', 'SIZE', 'CLIENTS', 'STARTED', 'COMMAND']];
    for (const t of list) rows.push([t.termId, String(t.pid), t.state, t.exitCode === null ? '-' : String(t.exitCode), `${t.cols}x${t.rows}`, String(t.clients), t.startedAt, t.argv.join(' ')]);
    println(ctx.io, table(rows));
    return 0;
  }
  if (ctx.sub === 'kill') {
    const { values: v, positionals } = parseCommand('terminal', 'kill', ctx.argv);
    let signal: number | undefined;
    if (v.signal !== undefined) {
      const name = `SIG${v.signal.toUpperCase().replace(/^SIG/, '')}`;
      if (/^\d+$/.test(v.signal)) signal = Number(v.signal);
      else if (name in SIGNALS) signal = SIGNALS[name as keyof typeof SIGNALS];
      else throw new UsageError(`--signal: unknown signal ${JSON.stringify(v.signal)}`, commandUsage('terminal', 'kill', SPEC.terminal.commands.kill));
    }
    const s = await ctx.client().sessions.get(positionals[0]!);
    const r = await s.terminals.kill(positionals[1]!, { signal });
    if (v.json) printJson(ctx.io, r);
    else println(ctx.io, r.signalled ? `sent signal ${r.signal} to ${r.termId}` : `${r.termId} had already ended`);
    return 0;
  }
  const { positionals } = parseCommand('terminal', 'record', ctx.argv);
  const s = await ctx.client().sessions.get(positionals[0]!);
  ctx.io.stdout.write(await s.terminals.recording(positionals[1]!));
  return 0;
}
