import { readFile } from 'node:fs/promises';
import { isAppError } from '../core/errors.js';
import type { BackendName } from '../core/sandbox.js';
import type { TemplateRecipeBody, TemplateView } from '../protocol/templates.js';
import { UsageError, parseCommand, printJson, println, table, writeBytes, type VerbContext } from './common.js';

const b64 = (s: string) => Buffer.from(s, 'base64');

function line(t: TemplateView): string {
  return `${t.name} (${t.backend}, ${t.sizeBytes} bytes, ${t.recipe.run.length} commands${t.from ? `, from ${t.from}` : ''}, ${t.createdAt})`;
}

async function readStdin(stdin: NodeJS.ReadStream): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of stdin) parts.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(parts).toString('utf8');
}

/** `berth template build|list|show|rm`. */
export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'build') return build(ctx);
  if (ctx.sub === 'list') {
    const { values: v } = parseCommand('template', 'list', ctx.argv);
    const list = await ctx.client().templates.list({ tenantId: v.tenant });
    if (v.json) printJson(ctx.io, { templates: list });
    else if (list.length === 0) println(ctx.io, 'no templates');
    else println(ctx.io, table([['NAME', 'BACKEND', 'FROM', 'COMMANDS', 'BYTES', 'CREATED'], ...list.map((t) => [t.name, t.backend, t.from ?? '', String(t.recipe.run.length), String(t.sizeBytes), t.createdAt])]));
    return 0;
  }
  const sub = ctx.sub === 'rm' ? 'rm' : 'show';
  const { values: v, positionals } = parseCommand('template', sub, ctx.argv);
  const name = positionals[0]!;
  if (sub === 'rm') {
    await ctx.client().templates.delete(name, { tenantId: v.tenant });
    if (v.json) printJson(ctx.io, { ok: true, name });
    else println(ctx.io, `${name} removed`);
    return 0;
  }
  const t = await ctx.client().templates.get(name, { tenantId: v.tenant });
  if (v.json) printJson(ctx.io, t);
  else {
    println(ctx.io, line(t));
    for (const f of t.recipe.files) println(ctx.io, `  file ${f}`);
    for (const c of t.recipe.run) println(ctx.io, `  run  ${c}`);
  }
  return 0;
}

/**
 * Streams the build: each step's command on stderr ("==> …"), its output as it comes (stdout to stdout,
 * stderr to stderr). A failing step's exit code is the CLI's exit status (1 for other failures).
 */
async function build(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('template', 'build', ctx.argv);
  const file = v.file as string;
  let recipe: TemplateRecipeBody;
  try {
    recipe = JSON.parse(file === '-' ? await readStdin(ctx.io.stdin) : await readFile(file, 'utf8')) as TemplateRecipeBody;
  } catch (e) {
    throw new UsageError(`cannot read a JSON recipe from ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, 'berth template build NAME --file recipe.json');
  }
  const io = ctx.io;
  try {
    const t = await ctx.client().templates.build(positionals[0]!, recipe, {
      backend: v.backend as BackendName | undefined,
      memoryMb: v.memory,
      diskMb: v.disk,
      cpus: v.cpus,
      tenantId: v.tenant,
      onEvent: (l) => {
        if (v.json) return void io.stdout.write(`${JSON.stringify(l)}\n`);
        if (l.type === 'step') io.stderr.write(`==> [${l.step}] ${l.kind === 'run' ? l.command : `write ${l.path}`}\n`);
        else if (l.type === 'stdout') void writeBytes(io.stdout, b64(l.data));
        else if (l.type === 'stderr') void writeBytes(io.stderr, b64(l.data));
        else if (l.type === 'capturing') io.stderr.write('==> capturing the machine\n');
      },
    });
    if (!v.json) println(io, `template ${line(t)}`);
    return 0;
  } catch (e) {
    const code = isAppError(e) ? e.details?.exitCode : undefined;
    if (typeof code === 'number' && code > 0 && code < 256) {
      io.stderr.write(`berth: ${(e as Error).message}\n`);
      return code;
    }
    throw e;
  }
}
