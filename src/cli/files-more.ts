/**
 * `berth files mv | push | pull | watch` (issue 9 §4). push and pull move a directory as a tar stream: the
 * local side is the local `tar` (modes, symlinks and binary content kept), the remote side the sandbox's,
 * and the bytes stream through without being held whole.
 */
import { spawn } from 'node:child_process';
import { mkdir, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { AppError } from '../core/errors.js';
import { parseCommand, printJson, println, writeBytes, type VerbContext } from './common.js';

export async function mv(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'mv', ctx.argv);
  const [id, from, to] = positionals as [string, string, string];
  await (await ctx.client().sessions.get(id)).files.move(from, to);
  if (v.json) printJson(ctx.io, { ok: true, from, to });
  return 0;
}

/** Runs the local tar; its failure (exit status and stderr) becomes an AppError naming it. */
function localTar(args: string[], stdio: 'pipe-out' | 'pipe-in') {
  const child = spawn('tar', args, { stdio: stdio === 'pipe-out' ? ['ignore', 'pipe', 'pipe'] : ['pipe', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const done = new Promise<void>((res, rej) => {
    child.on('error', (e) => rej(new AppError('unavailable', `local tar: ${e.message} (is tar installed?)`)));
    child.on('close', (code) => (code === 0 ? res() : rej(new AppError('invalid_argument', `local tar exited ${code}: ${err.trim().slice(0, 2000)}`))));
  });
  done.catch(() => undefined);
  return { child, done };
}

async function localDir(path: string, create: boolean): Promise<string> {
  const abs = resolve(path);
  if (create) await mkdir(abs, { recursive: true });
  const st = await stat(abs).catch(() => null);
  if (!st?.isDirectory()) throw new AppError('invalid_argument', `${path} is not a local directory`, { details: { field: 'LOCAL_DIR' } });
  return abs;
}

export async function push(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'push', ctx.argv);
  const [id, local, remote] = positionals as [string, string, string];
  const dir = await localDir(local, false);
  const s = await ctx.client().sessions.get(id);
  const tar = localTar(['-c', '-f', '-', '-C', dir, '.'], 'pipe-out');
  const r = await s.files.pushTar(remote, tar.child.stdout!);
  await tar.done;
  if (v.json) printJson(ctx.io, r);
  else println(ctx.io, `pushed ${dir} to ${r.path} (${r.bytes} bytes of tar)`);
  return 0;
}

export async function pull(ctx: VerbContext): Promise<number> {
  const { positionals } = parseCommand('files', 'pull', ctx.argv);
  const [id, remote, local] = positionals as [string, string, string];
  const s = await ctx.client().sessions.get(id);
  const src = s.files.pullTar(remote)[Symbol.asyncIterator]();
  const first = await src.next(); // a missing remote directory fails before anything is made locally
  const dir = await localDir(local, true);
  const tar = localTar(['-x', '-p', '-f', '-', '-C', dir], 'pipe-in');
  const stdin = tar.child.stdin!;
  stdin.on('error', () => undefined); // tar's own failure is reported by tar.done
  for (let r = first; !r.done; r = await src.next()) await writeBytes(stdin, r.value);
  stdin.end();
  await tar.done;
  return 0;
}

/** One JSON line per event until Ctrl-C. */
export async function watch(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('files', 'watch', ctx.argv);
  const [id, path] = positionals as [string, string];
  const s = await ctx.client().sessions.get(id);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.on('SIGINT', onSigint);
  try {
    for await (const ev of s.files.watch(path, { recursive: v.recursive, signal: ac.signal })) {
      await writeBytes(ctx.io.stdout, new TextEncoder().encode(`${JSON.stringify(ev)}\n`));
    }
    return 0;
  } catch (e) {
    if (ac.signal.aborted) return 130;
    throw e;
  } finally {
    process.off('SIGINT', onSigint);
  }
}
