/**
 * The memory driver's userland: a small POSIX-like shell and a fixed set of built-in commands, enough for
 * tests above the driver port. Nothing here runs a host binary.
 *
 * Shell: `;`, newlines, `&` (background job), `&&`, `||`, `|` (buffered: the left side runs to its end
 * first), `NAME=value` (alone, or before a command), quoting with '…' and "…",
 * `\` escapes, and `$NAME`, `${NAME}`, `$?`, `$$` expansion (no word splitting or globbing). Redirections:
 * `> f`, `>> f`, `< f`, `2> f`, `2>> f`, `2>&1`, `>&2`, `1>&2`.
 *
 * Commands (see BUILTINS): `:` `true` `false` `echo [-n]` `printf FMT ARGS…` (%s %d %%, \n \t \\) `cat [F…]`
 * `exit [N]` `sleep SECONDS` (fractions allowed) `pwd` `hostname` `env` `sha256sum [F]` `head -c N|-n N [F]`
 * `wc -c|-l [F]` `ls [P]` `mkdir [-p] P…` `rm [-r] [-f] P…` `touch F…` `ln -s TARGET NAME` `setsid CMD…`
 * `sh -c SCRIPT` / `sh` (script on stdin). Anything else exits 127 ("command not found").
 */
import { createHash } from 'node:crypto';
import type { AppError } from '../../core/index.js';
import { concat, type MemoryFs } from './fs.js';

/** How a command reads its stdin: chunks until null. */
export interface Reader {
  read(): Promise<Uint8Array | null>;
}
/** Where a command writes: resolves once the bytes are taken (held while the machine is paused). */
export type Sink = (data: Uint8Array) => Promise<void>;

/** What every command sees: the machine and its own process context. */
export interface ShellContext {
  fs: MemoryFs;
  hostname: () => string;
  env: Record<string, string>;
  cwd: string;
  stdin: Reader;
  stdout: Sink;
  stderr: Sink;
  /** Aborted when the command (or its process group) is killed. */
  signal: AbortSignal;
  /** Resolves when the machine is running (immediately unless paused). */
  running: () => Promise<void>;
  /** Starts a background job detached from the caller; it ends with the machine. */
  spawnJob: (run: (signal: AbortSignal) => Promise<unknown>) => void;
  /** 1 ms of accounted CPU per command run. */
  charge: () => void;
  lastStatus: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
export const EMPTY: Reader = { read: async () => null };

export function readerOf(data: Uint8Array): Reader {
  let done = false;
  return { read: async () => (done ? null : ((done = true), data)) };
}

async function readAll(r: Reader): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for (let c = await r.read(); c !== null; c = await r.read()) parts.push(c);
  return concat(parts);
}

/** `exit N` unwinds to the enclosing shell with this. */
class Exit {
  constructor(readonly code: number) {}
}

/** Sleeps for ms, cut short by the signal; the wake-up waits while the machine is paused. */
export async function pausableSleep(ms: number, ctx: Pick<ShellContext, 'signal' | 'running'>): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    if (ctx.signal.aborted) return reject(ctx.signal.reason);
    const t = setTimeout(() => {
      ctx.signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(ctx.signal.reason);
    };
    ctx.signal.addEventListener('abort', onAbort, { once: true });
  });
  await ctx.running();
}

// ---- parsing ----------------------------------------------------------------------------------------------

/** A word as written: its pieces keep their quoting, expanded at run time. */
type Piece = { text: string; quote: 'none' | 'single' | 'double' };
type Tok = { kind: 'word'; pieces: Piece[] } | { kind: 'op'; op: string };
interface Redirect {
  fd: number;
  op: '>' | '>>' | '<' | '>&';
  target: Piece[];
}
interface Simple {
  assigns: Array<{ name: string; value: Piece[] }>;
  words: Piece[][];
  redirects: Redirect[];
}
type Pipeline = Simple[];
interface AndOr {
  first: Pipeline;
  rest: Array<{ op: '&&' | '||'; pipe: Pipeline }>;
  background: boolean;
}

function tokenize(src: string): Tok[] {
  const toks: Tok[] = [];
  let i = 0;
  let pieces: Piece[] | null = null;
  const piece = (text: string, quote: Piece['quote']) => (pieces ??= []).push({ text, quote });
  const endWord = () => {
    if (pieces) toks.push({ kind: 'word', pieces });
    pieces = null;
  };
  while (i < src.length) {
    const c = src[i] as string;
    if (c === ' ' || c === '\t') {
      endWord();
      i++;
    } else if (c === '#' && pieces === null) {
      while (i < src.length && src[i] !== '\n') i++;
    } else if (c === "'") {
      const j = src.indexOf("'", i + 1);
      if (j < 0) throw new SyntaxError('unterminated quote');
      piece(src.slice(i + 1, j), 'single');
      i = j + 1;
    } else if (c === '"') {
      let j = i + 1;
      let text = '';
      while (j < src.length && src[j] !== '"') {
        if (src[j] === '\\' && j + 1 < src.length && '"\\$`'.includes(src[j + 1] as string)) {
          text += src[j + 1] === '$' ? '\\$' : src[j + 1];
          j += 2;
        } else text += src[j++];
      }
      if (j >= src.length) throw new SyntaxError('unterminated quote');
      piece(text, 'double');
      i = j + 1;
    } else if (c === '\\') {
      piece(src[i + 1] ?? '', 'single');
      i += 2;
    } else if (/^[0-9]$/.test(c) && pieces === null && (src[i + 1] === '>' || src[i + 1] === '<')) {
      const m = /^([0-9])(>>|>&|>|<)/.exec(src.slice(i)) as RegExpExecArray;
      toks.push({ kind: 'op', op: m[0] });
      i += m[0].length;
    } else if ('|&;<>\n'.includes(c)) {
      endWord();
      const two = src.slice(i, i + 2);
      const op = ['&&', '||', '>>', '>&'].includes(two) ? two : c;
      toks.push({ kind: 'op', op });
      i += op.length;
    } else {
      let j = i;
      while (j < src.length && !" \t'\"\\|&;<>\n".includes(src[j] as string)) j++;
      piece(src.slice(i, j), 'none');
      i = j;
    }
  }
  endWord();
  return toks;
}

function parse(src: string): AndOr[] {
  const toks = tokenize(src);
  let i = 0;
  const peek = () => toks[i];
  const isOp = (t: Tok | undefined, ...ops: string[]) => t?.kind === 'op' && ops.includes(t.op);
  const simple = (): Simple => {
    const s: Simple = { assigns: [], words: [], redirects: [] };
    for (;;) {
      const t = peek();
      if (!t) break;
      if (t.kind === 'word') {
        const first = t.pieces[0];
        const m = s.words.length === 0 && first?.quote === 'none' ? /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(first.text) : null;
        if (m) s.assigns.push({ name: m[1] as string, value: [{ text: m[2] as string, quote: 'none' }, ...t.pieces.slice(1)] });
        else s.words.push(t.pieces);
        i++;
        continue;
      }
      const r = /^([0-9]?)(>>|>&|>|<)$/.exec(t.op);
      if (!r) break;
      i++;
      const target = toks[i++];
      if (target?.kind !== 'word') throw new SyntaxError(`redirection ${t.op} needs a target`);
      const op = r[2] as Redirect['op'];
      s.redirects.push({ fd: r[1] ? Number(r[1]) : op === '<' ? 0 : 1, op, target: target.pieces });
    }
    return s;
  };
  const pipeline = (): Pipeline => {
    const p = [simple()];
    while (isOp(peek(), '|')) {
      i++;
      p.push(simple());
    }
    return p;
  };
  const out: AndOr[] = [];
  while (i < toks.length) {
    if (isOp(peek(), ';', '\n')) {
      i++;
      continue;
    }
    const a: AndOr = { first: pipeline(), rest: [], background: false };
    while (isOp(peek(), '&&', '||')) {
      const op = (toks[i++] as { op: '&&' | '||' }).op;
      while (isOp(peek(), '\n')) i++;
      a.rest.push({ op, pipe: pipeline() });
    }
    if (isOp(peek(), '&')) {
      a.background = true;
      i++;
    }
    const t = peek();
    if (t && !a.background && !isOp(t, ';', '\n')) throw new SyntaxError(`unexpected ${t.kind === 'op' ? t.op : 'word'}`);
    out.push(a);
  }
  return out;
}

// ---- running ----------------------------------------------------------------------------------------------

function expand(pieces: Piece[], ctx: ShellContext): string {
  return pieces
    .map((p) => {
      if (p.quote === 'single') return p.text;
      return p.text.replace(/\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*|\?|\$)/g, (m, braced?: string, bare?: string) => {
        if (m === '\\$') return '$';
        const name = braced ?? bare ?? '';
        if (name === '?') return String(ctx.lastStatus);
        if (name === '$') return '1';
        return ctx.env[name] ?? '';
      });
    })
    .join('');
}

/** Runs a script; resolves with its exit status. */
export async function runScript(src: string, ctx: ShellContext): Promise<number> {
  let list: AndOr[];
  try {
    list = parse(src);
  } catch (e) {
    await ctx.stderr(enc.encode(`sh: syntax error: ${(e as Error).message}\n`));
    return 2;
  }
  try {
    for (const a of list) {
      if (a.background) {
        const job = { ...ctx, env: { ...ctx.env } };
        ctx.spawnJob((signal) => runAndOr(a, { ...job, signal }).catch(() => undefined));
        ctx.lastStatus = 0;
      } else {
        ctx.lastStatus = await runAndOr(a, ctx);
      }
    }
  } catch (e) {
    if (e instanceof Exit) return e.code;
    throw e;
  }
  return ctx.lastStatus;
}

async function runAndOr(a: AndOr, ctx: ShellContext): Promise<number> {
  let status = await runPipeline(a.first, ctx);
  for (const { op, pipe } of a.rest) {
    if ((op === '&&') === (status === 0)) status = await runPipeline(pipe, ctx);
    ctx.lastStatus = status;
  }
  return status;
}

async function runPipeline(p: Pipeline, ctx: ShellContext): Promise<number> {
  let stdin = ctx.stdin;
  let status = 0;
  for (let k = 0; k < p.length; k++) {
    const last = k === p.length - 1;
    const buffered: Uint8Array[] = [];
    const stdout: Sink = last ? ctx.stdout : async (d) => void buffered.push(d);
    status = await runSimple(p[k] as Simple, { ...ctx, stdin, stdout });
    stdin = readerOf(concat(buffered));
  }
  return status;
}

async function runSimple(s: Simple, ctx0: ShellContext): Promise<number> {
  if (ctx0.signal.aborted) throw ctx0.signal.reason;
  const argv = s.words.map((w) => expand(w, ctx0));
  const values = s.assigns.map((x) => [x.name, expand(x.value, ctx0)] as const);
  if (argv.length === 0) {
    for (const [k, v] of values) ctx0.env[k] = v;
  }
  const ctx: ShellContext = argv.length === 0 ? ctx0 : { ...ctx0, env: { ...ctx0.env, ...Object.fromEntries(values) } };
  try {
    for (const r of s.redirects) {
      const target = expand(r.target, ctx);
      if (r.op === '>&') {
        const sink = target === '1' ? ctx.stdout : target === '2' ? ctx.stderr : null;
        if (!sink) throw new Error(`bad file descriptor ${target}`);
        if (r.fd === 1) ctx.stdout = sink;
        else if (r.fd === 2) ctx.stderr = sink;
      } else if (r.op === '<') {
        ctx.stdin = readerOf(ctx.fs.readFile(target, ctx.cwd));
      } else {
        if (!ctx.fs.discards(target)) ctx.fs.writeFile(target, new Uint8Array(0), { cwd: ctx.cwd, append: r.op === '>>' });
        // Written through as it comes, so a reader sees the output of a running command.
        const sink: Sink = async (d) => ctx.fs.writeFile(target, d, { cwd: ctx.cwd, append: true });
        if (r.fd === 1) ctx.stdout = sink;
        else if (r.fd === 2) ctx.stderr = sink;
      }
    }
  } catch (e) {
    await ctx0.stderr(enc.encode(`sh: ${(e as Error).message}\n`));
    return 1;
  }
  if (argv.length === 0) return 0;
  return runCommand(argv, ctx);
}

/** Runs an exec's argv as a process: resolves with its exit status (`exit N` included). */
export async function runProgram(argv: string[], ctx: ShellContext): Promise<number> {
  try {
    return await runCommand(argv, ctx);
  } catch (e) {
    if (e instanceof Exit) return e.code;
    throw e;
  }
}

/** Runs one command (a builtin), for exec and for the shell. */
export async function runCommand(argv: string[], ctx: ShellContext): Promise<number> {
  const [name = '', ...args] = argv;
  const fn = BUILTINS[name] ?? BUILTINS[name.replace(/^\/(usr\/)?s?bin\//, '')];
  ctx.charge();
  if (!fn) {
    await ctx.stderr(enc.encode(name.includes('/') ? `${name}: No such file or directory\n` : `${name}: command not found\n`));
    return 127;
  }
  try {
    return await fn(args, ctx);
  } catch (e) {
    if (e instanceof Exit || ctx.signal.aborted) throw e;
    const code = (e as AppError).code;
    if (code) {
      await ctx.stderr(enc.encode(`${name}: ${(e as Error).message}\n`));
      return 1;
    }
    throw e;
  }
}

const say = (ctx: ShellContext, text: string) => ctx.stdout(enc.encode(text));
async function input(ctx: ShellContext, file: string | undefined): Promise<Uint8Array> {
  return file === undefined || file === '-' ? readAll(ctx.stdin) : ctx.fs.readFile(file, ctx.cwd);
}
const flags = (args: string[]) => ({ set: new Set(args.filter((a) => /^-[a-z]+$/.test(a)).flatMap((a) => [...a.slice(1)])), rest: args.filter((a) => !/^-[a-z]+$/.test(a)) });
const abs = (ctx: ShellContext, p: string) => (p.startsWith('/') ? p : `${ctx.cwd}/${p}`);

type Builtin = (args: string[], ctx: ShellContext) => Promise<number>;

export const BUILTINS: Record<string, Builtin> = {
  ':': async () => 0,
  true: async () => 0,
  false: async () => 1,
  echo: async (args, ctx) => {
    const n = args[0] === '-n';
    await say(ctx, (n ? args.slice(1) : args).join(' ') + (n ? '' : '\n'));
    return 0;
  },
  printf: async ([fmt = '', ...args], ctx) => {
    const unescaped = fmt.replace(/\\([ntr\\])/g, (_, c: string) => ({ n: '\n', t: '\t', r: '\r', '\\': '\\' })[c] as string);
    let k = 0;
    await say(ctx, unescaped.replace(/%([sd%])/g, (_, c: string) => (c === '%' ? '%' : c === 'd' ? String(Math.trunc(Number(args[k++] ?? 0))) : (args[k++] ?? ''))));
    return 0;
  },
  cat: async (args, ctx) => {
    if (args.length === 0) {
      for (let c = await ctx.stdin.read(); c !== null; c = await ctx.stdin.read()) await ctx.stdout(c);
      return 0;
    }
    for (const f of args) await ctx.stdout(await input(ctx, f));
    return 0;
  },
  exit: async ([n]) => {
    throw new Exit(n === undefined ? 0 : Number(n) & 255);
  },
  sleep: async ([s = '0'], ctx) => {
    const secs = Number(s);
    if (!Number.isFinite(secs) || secs < 0) {
      await ctx.stderr(enc.encode(`sleep: invalid time interval '${s}'\n`));
      return 1;
    }
    await pausableSleep(secs * 1000, ctx);
    return 0;
  },
  pwd: async (_a, ctx) => (await say(ctx, `${ctx.cwd}\n`), 0),
  hostname: async (_a, ctx) => (await say(ctx, `${ctx.hostname()}\n`), 0),
  env: async (_a, ctx) => (await say(ctx, Object.entries(ctx.env).map(([k, v]) => `${k}=${v}\n`).join('')), 0),
  sha256sum: async ([f], ctx) => {
    await say(ctx, `${createHash('sha256').update(await input(ctx, f)).digest('hex')}  ${f ?? '-'}\n`);
    return 0;
  },
  head: async (args, ctx) => {
    const [opt, n, f] = args[0] === '-c' || args[0] === '-n' ? args : ['-n', '10', args[0]];
    const data = await input(ctx, f);
    if (opt === '-c') await ctx.stdout(data.subarray(0, Number(n)));
    else await say(ctx, dec.decode(data).split(/(?<=\n)/).slice(0, Number(n)).join(''));
    return 0;
  },
  wc: async ([opt, f], ctx) => {
    const data = await input(ctx, f);
    const n = opt === '-l' ? data.filter((b) => b === 10).length : data.byteLength;
    await say(ctx, `${n}\n`);
    return 0;
  },
  ls: async ([p = '.'], ctx) => {
    const path = abs(ctx, p);
    const n = ctx.fs.get(path);
    await say(ctx, n.type === 'dir' ? ctx.fs.list(path).map((e) => `${e.name}\n`).join('') : `${p}\n`);
    return 0;
  },
  mkdir: async (args, ctx) => {
    const { set, rest } = flags(args);
    for (const p of rest) ctx.fs.mkdir(p, { parents: set.has('p'), cwd: ctx.cwd });
    return 0;
  },
  rm: async (args, ctx) => {
    const { set, rest } = flags(args);
    for (const p of rest) {
      try {
        ctx.fs.remove(p, { recursive: set.has('r') || set.has('R'), cwd: ctx.cwd });
      } catch (e) {
        if (!(set.has('f') && (e as AppError).code === 'not_found')) throw e;
      }
    }
    return 0;
  },
  touch: async (args, ctx) => {
    for (const f of args) {
      const found = ctx.fs.find(f, { cwd: ctx.cwd });
      if (!found.node) ctx.fs.writeFile(f, new Uint8Array(0), { cwd: ctx.cwd });
      else found.node.mtimeMs = Date.now();
    }
    return 0;
  },
  ln: async (args, ctx) => {
    const { set, rest } = flags(args);
    if (!set.has('s') || rest.length !== 2) {
      await ctx.stderr(enc.encode('ln: only `ln -s TARGET NAME` is supported\n'));
      return 1;
    }
    ctx.fs.symlink(rest[0] as string, rest[1] as string, ctx.cwd);
    return 0;
  },
  setsid: async (args, ctx) => runCommand(args, ctx),
  sh: async (args, ctx) => {
    const sub = { ...ctx, env: { ...ctx.env } };
    if (args[0] === '-c') return runScript(args[1] ?? '', sub);
    return runScript(dec.decode(await readAll(ctx.stdin)), sub);
  },
};
BUILTINS.bash = BUILTINS.sh as Builtin;
