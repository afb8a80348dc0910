/** What every verb shares: argument parsing that fails as a usage error, output helpers, the client. */
import { AppError, isAppError } from '../core/errors.js';
import type { Berth } from '../sdk/index.js';
import { SPEC, type Command, type Flag, type VerbName } from './commands.js';
import { commandUsage, didYouMean, flagPlaceholder } from './usage.js';

export interface Io {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  stdin: NodeJS.ReadStream;
}

export interface VerbContext {
  /** The subcommand main.ts resolved from the table ('' for a verb used without one; aliases resolved). */
  sub: string;
  /** Arguments after the verb and its subcommand. */
  argv: string[];
  io: Io;
  /** The client, built on first use from BERTH_URL / BERTH_TOKEN / $BERTH_DATA/root.key. */
  client(): Berth;
}

export type Verb = (ctx: VerbContext) => Promise<number>;

/** A mistake on the command line: exit status 2, and the usage line is printed. */
export class UsageError extends AppError {
  constructor(message: string, usage: string) {
    super('invalid_argument', message, { details: { usage } });
  }
}

export function usageOf(e: unknown): string | undefined {
  if (!isAppError(e) || e.code !== 'invalid_argument') return undefined;
  const u = e.details?.usage;
  return typeof u === 'string' && e.details?.httpStatus === undefined ? u : undefined;
}

type FlagValue<F> = F extends { kind: 'bool' }
  ? boolean
  : F extends { kind: 'int' | 'number' }
    ? number
    : F extends { kind: 'kv' }
      ? Record<string, string>
      : F extends { kind: 'list' }
        ? string[]
        : string;

export type Values<C extends Command> = { -readonly [K in keyof C['flags']]?: FlagValue<C['flags'][K]> };

export interface Parsed<C extends Command> {
  values: Values<C>;
  positionals: string[];
  /** What followed `--` (only for commands whose usage ends in `-- …`; else those are positionals). */
  rest: string[];
}

type Commands<V extends VerbName> = (typeof SPEC)[V]['commands'];

/**
 * Parses a command line by the table in commands.ts: unknown flags (with a suggestion), missing or bad
 * values (numbers checked against their range, which is the server's LIMITS), missing required flags and
 * the wrong number of positionals are UsageErrors (exit 2) naming the flag. Values come back converted.
 */
export function parseCommand<V extends VerbName, S extends keyof Commands<V> & string>(verb: V, sub: S, argv: string[]): Parsed<Commands<V>[S] & Command> {
  const c = (SPEC[verb].commands as Record<string, Command>)[sub];
  if (!c) throw new Error(`no command ${verb} ${sub} in the table`);
  const usage = commandUsage(verb, sub, c);
  const where = `berth ${verb}${sub ? ` ${sub}` : ''}`;
  const fail = (m: string): never => {
    throw new UsageError(m, usage);
  };
  const dd = argv.indexOf('--');
  const head = dd >= 0 ? argv.slice(0, dd) : argv;
  const after = dd >= 0 ? argv.slice(dd + 1) : [];
  const takesTail = c.tail?.startsWith('--') ?? false;
  const raw = new Map<string, string[]>();
  const positionals: string[] = [];
  const names = Object.keys(c.flags);
  const shorts = new Map(Object.entries(c.flags).filter(([, f]) => f.short).map(([n, f]) => [f.short!, n]));
  for (let i = 0; i < head.length; i++) {
    const tok = head[i]!;
    if (tok.startsWith('--')) {
      const eq = tok.indexOf('=');
      const name = tok.slice(2, eq >= 0 ? eq : undefined);
      const f = c.flags[name];
      if (!f) fail(`${where}: unknown flag --${name}${didYouMean(name, names, (s) => `--${s}`)}`);
      let value: string;
      if (f!.kind === 'bool') {
        if (eq >= 0) fail(`--${name}: takes no value`);
        value = 'true';
      } else if (eq >= 0) value = tok.slice(eq + 1);
      else {
        if (i + 1 >= head.length) fail(`--${name}: needs a value (${flagPlaceholder(name, f!)})`);
        value = head[++i]!;
      }
      raw.set(name, [...(raw.get(name) ?? []), value]);
    } else if (tok.length > 1 && tok.startsWith('-') && !/^-\d/.test(tok)) {
      for (const ch of tok.slice(1)) {
        const name = shorts.get(ch);
        if (!name) fail(`${where}: unknown flag -${ch}${didYouMean(ch, [...shorts.keys()], (s) => `-${s}`)}`);
        raw.set(name!, ['true']);
      }
    } else positionals.push(tok);
  }
  if (!takesTail) positionals.push(...after);

  const values: Record<string, unknown> = {};
  for (const [name, f] of Object.entries(c.flags)) {
    const given = raw.get(name);
    if (!given) {
      if (f.required) fail(`--${name}: is required`);
      continue;
    }
    values[name] = convert(name, f, given, fail);
  }
  if (c.min !== undefined && positionals.length < c.min) fail(`${where}: missing ${c.args ?? 'argument'}`);
  if (c.max !== undefined && positionals.length > c.max) fail(`${where}: unexpected argument ${JSON.stringify(positionals[c.max])}`);
  return { values: values as Values<Commands<V>[S] & Command>, positionals, rest: takesTail ? after : [] };
}

/** Units of numeric placeholders, for messages. */
const UNITS: Record<string, string> = { MB: 'MiB', MS: 'ms', S: 'seconds' };

function convert(name: string, f: Flag, given: string[], fail: (m: string) => never): unknown {
  const last = given[given.length - 1]!;
  switch (f.kind) {
    case 'bool':
      return true;
    case 'string':
      return last;
    case 'list':
      return given;
    case 'choice':
      if (!f.choices!.includes(last)) fail(`--${name}: must be ${f.choices!.join(' or ')}, got ${JSON.stringify(last)}${didYouMean(last, f.choices!)}`);
      return last;
    case 'kv': {
      const out: Record<string, string> = {};
      for (const item of given) {
        const i = item.indexOf('=');
        if (i <= 0) fail(`--${name}: expected K=V, got ${JSON.stringify(item)}`);
        out[item.slice(0, i)] = item.slice(i + 1);
      }
      return out;
    }
    case 'int':
    case 'number': {
      const n = Number(last);
      const what = f.kind === 'int' ? 'an integer' : 'a number';
      const range = f.min !== undefined && f.max !== undefined ? ` ${f.min}..${f.max}` : '';
      const unit = f.arg && Object.hasOwn(UNITS, f.arg) ? ` ${UNITS[f.arg]}` : '';
      const ok = last.trim() !== '' && Number.isFinite(n) && (f.kind === 'number' || Number.isInteger(n));
      if (!ok || (f.min !== undefined && n < f.min) || (f.max !== undefined && n > f.max)) {
        fail(`--${name}: must be ${what}${range}${unit}, got ${JSON.stringify(last)}`);
      }
      return n;
    }
  }
}

export function printJson(io: Io, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function println(io: Io, line = ''): void {
  io.stdout.write(`${line}\n`);
}

/** Writes bytes, waiting for the stream to drain so a slow reader never makes us buffer everything. */
export function writeBytes(stream: NodeJS.WritableStream, data: Uint8Array): Promise<void> | void {
  if (stream.write(data)) return;
  return new Promise((resolve, reject) => {
    const done = (e?: Error) => {
      stream.off('drain', onDrain);
      stream.off('error', done);
      if (e) reject(e);
      else resolve();
    };
    const onDrain = () => done();
    stream.once('drain', onDrain);
    stream.once('error', done);
  });
}

/** Columns padded to their widest cell. */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ')).join('\n');
}
