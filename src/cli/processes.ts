/**
 * `berth ps | logs | kill`: background processes of a session (started with `berth exec --background`).
 * One thin function per verb: parse, call the SDK, report.
 */
import { SIGNALS } from '../protocol/schemas.js';
import { UsageError, parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';

import { commandUsage } from './usage.js';
import { SPEC } from './commands.js';

export async function ps(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('ps', '', ctx.argv);
  const s = await ctx.client().sessions.get(positionals[0]!);
  const list = await s.processes.list();
  if (v.json) {
    printJson(ctx.io, list);
    return 0;
  }
  const rows = [['EXECID', 'PID', 'STATE', 'EXIT', 'STARTED', 'COMMAND']];
  for (const p of list) rows.push([p.execId, String(p.pid), p.state, p.exitCode === null ? '-' : String(p.exitCode), p.startedAt, p.argv.join(' ')]);
  println(ctx.io, table(rows));
  return 0;
}

/**
 * Replays what the sandbox kept, then (--follow) streams live until the command ends; Ctrl-C detaches and
 * never stops the command. A dropped connection is resumed from the last cursor (nothing lost or repeated).
 * Exit status with --follow: the command's.
 */
export async function logs(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('logs', '', ctx.argv);
  if (v.offset !== undefined && !/^\d{1,15}(,\d{1,15})?$/.test(v.offset)) throw new UsageError(`--offset: must be N or N,M, got ${JSON.stringify(v.offset)}`, commandUsage('logs', '', SPEC.logs.commands['']));
  const s = await ctx.client().sessions.get(positionals[0]!);
  const proc = s.processes.get(positionals[1]!);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.on('SIGINT', onSigint);
  try {
    for await (const ev of proc.output({ follow: v.follow, offset: v.offset, signal: ac.signal })) {
      if (ev.type === 'exit') return v.follow ? ev.exit.code : 0;
      if ((ev.type === 'stdout' && v.stderr && !v.stdout) || (ev.type === 'stderr' && v.stdout && !v.stderr)) continue;
      await writeBytes(ev.type === 'stdout' ? ctx.io.stdout : ctx.io.stderr, ev.data);
    }
    return 0;
  } catch (e) {
    if (ac.signal.aborted) return 130; // detached; the command runs on
    throw e;
  } finally {
    process.off('SIGINT', onSigint);
  }
}

export async function kill(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('kill', '', ctx.argv);
  let signal: number | string | undefined = v.signal;
  if (signal !== undefined && /^\d+$/.test(signal)) signal = Number(signal);
  else if (signal !== undefined && !(`SIG${signal.toUpperCase().replace(/^SIG/, '')}` in SIGNALS)) {
    throw new UsageError(`--signal: unknown signal ${JSON.stringify(signal)}`, commandUsage('kill', '', SPEC.kill.commands['']));
  }
  const s = await ctx.client().sessions.get(positionals[0]!);
  const r = await s.processes.get(positionals[1]!).kill({ signal });
  if (v.json) printJson(ctx.io, r);
  else println(ctx.io, r.signalled ? `sent signal ${r.signal} to ${r.execId}` : `${r.execId} had already ended`);
  return 0;
}
