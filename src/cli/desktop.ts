/** `berth desktop ID`, `berth desktop record ID [--stop]`, `berth desktop recording ID > video.ts`. */
import type { DesktopRecordingView } from '../sdk/index.js';
import { SPEC } from './commands.js';
import { UsageError, parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';
import { commandUsage } from './usage.js';

export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'record') return record(ctx);
  if (ctx.sub === 'recording') return recording(ctx);
  return show(ctx);
}

function describe(r: DesktopRecordingView): string {
  if (r.execId === null) return 'none';
  const size = `${r.bytes} bytes${r.cap === null ? '' : ` of ${r.cap}`}`;
  return r.recording ? `yes, since ${r.startedAt} (${size})` : `no, last ended ${r.endedAt ?? '-'} (${size})`;
}

async function show(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('desktop', '', ctx.argv);
  const info = await (await ctx.client().sessions.get(positionals[0]!)).desktop.info();
  if (v.json) printJson(ctx.io, info);
  else println(ctx.io, table([['screen', `${info.screen.width}x${info.screen.height}`], ['recording', describe(info.recording)]]));
  return 0;
}

async function record(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('desktop', 'record', ctx.argv);
  if (v.stop && v['max-bytes'] !== undefined) throw new UsageError('--max-bytes: only when starting a recording, not with --stop', commandUsage('desktop', 'record', SPEC.desktop.commands.record));
  const id = positionals[0]!;
  const d = (await ctx.client().sessions.get(id)).desktop;
  if (v.stop) {
    const r = await d.stopRecording();
    if (v.json) printJson(ctx.io, r);
    else println(ctx.io, r.stopped ? `stopped: ${r.bytes} bytes recorded (berth desktop recording ${id} > video.ts)` : 'nothing was recording');
    return 0;
  }
  const r = await d.record({ maxBytes: v['max-bytes'] });
  if (v.json) printJson(ctx.io, r);
  else println(ctx.io, `recording ${id}'s desktop (${r.execId}, at most ${r.cap} bytes); stop it with: berth desktop record ${id} --stop`);
  return 0;
}

async function recording(ctx: VerbContext): Promise<number> {
  const { positionals } = parseCommand('desktop', 'recording', ctx.argv);
  // A video on a terminal is noise that can leave it in a bad state.
  if (ctx.io.stdout.isTTY) throw new UsageError('refusing to write a video to a terminal: redirect it to a file', commandUsage('desktop', 'recording', SPEC.desktop.commands.recording));
  const s = await ctx.client().sessions.get(positionals[0]!);
  for await (const chunk of s.desktop.recordingStream()) await writeBytes(ctx.io.stdout, chunk);
  return 0;
}
