import { UsageError, parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';
import { commandUsage } from './usage.js';
import { SPEC } from './commands.js';
import { mv, pull, push, watch } from './files-more.js';

export async function run(ctx: VerbContext): Promise<number> {
  switch (ctx.sub) {
    case 'write':
      return write(ctx);
    case 'read':
      return read(ctx);
    case 'list':
      return list(ctx);
    case 'stat':
      return stat(ctx);
    case 'mkdir':
      return mkdir(ctx);
    case 'mv':
      return mv(ctx);
    case 'push':
      return push(ctx);
    case 'pull':
      return pull(ctx);
    case 'watch':
      return watch(ctx);
    default:
      return rm(ctx);
  }
}

function idAndPath(positionals: string[]): [string, string] {
  return [positionals[0]!, positionals[1]!];
}

async function write(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'write', ctx.argv);
  if (v.mode !== undefined && !/^0?[0-7]{3,4}$/.test(v.mode)) throw new UsageError(`--mode: must be octal such as 644, got ${JSON.stringify(v.mode)}`, commandUsage('files', 'write', SPEC.files.commands.write));
  const [id, path] = idAndPath(positionals);
  const s = await ctx.client().sessions.get(id);
  // stdin streams straight into the request body: a 100 MB file is never held whole.
  const r = await s.files.write(path, ctx.io.stdin, { mode: v.mode === undefined ? undefined : parseInt(v.mode, 8), parents: !v['no-parents'] });
  if (v.json) printJson(ctx.io, r);
  else println(ctx.io, `wrote ${r.bytes} bytes to ${r.path}`);
  return 0;
}

async function read(ctx: VerbContext): Promise<number> {
  const { positionals } = parseCommand('files', 'read', ctx.argv);
  const [id, path] = idAndPath(positionals);
  const s = await ctx.client().sessions.get(id);
  for await (const chunk of s.files.read(path)) await writeBytes(ctx.io.stdout, chunk);
  return 0;
}

const TYPE_CHAR: Record<string, string> = { file: '-', dir: 'd', symlink: 'l', other: '?' };

async function list(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'list', ctx.argv);
  const [id, path] = idAndPath(positionals);
  const entries = await (await ctx.client().sessions.get(id)).files.list(path);
  if (v.json) printJson(ctx.io, { path, entries });
  else if (entries.length > 0) {
    const rows = entries.map((e) => [
      `${TYPE_CHAR[e.type] ?? '?'}${(e.mode & 0o7777).toString(8).padStart(4, '0')}`,
      String(e.size),
      new Date(e.mtimeMs).toISOString(),
      e.name,
    ]);
    println(ctx.io, table(rows));
  }
  return 0;
}

async function stat(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'stat', ctx.argv);
  const [id, path] = idAndPath(positionals);
  const st = await (await ctx.client().sessions.get(id)).files.stat(path);
  if (v.json) printJson(ctx.io, st);
  else println(ctx.io, `${st.path}: ${st.type}, ${st.size} bytes, mode ${(st.mode & 0o7777).toString(8)}, modified ${new Date(st.mtimeMs).toISOString()}`);
  return 0;
}

async function mkdir(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'mkdir', ctx.argv);
  const [id, path] = idAndPath(positionals);
  await (await ctx.client().sessions.get(id)).files.mkdir(path, { parents: v.parents ?? false });
  if (v.json) printJson(ctx.io, { ok: true, path });
  return 0;
}

async function rm(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'rm', ctx.argv);
  const [id, path] = idAndPath(positionals);
  await (await ctx.client().sessions.get(id)).files.rm(path, { recursive: v.recursive ?? false });
  if (v.json) printJson(ctx.io, { ok: true, path });
  return 0;
}
