/** What every verb shares: argument parsing that fails as a usage error, output helpers, the client. */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { AppError, isAppError } from '../core/errors.js';
import type { Berth } from '../sdk/index.js';

export interface Io {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  stdin: NodeJS.ReadStream;
}

export interface VerbContext {
  /** Arguments after the verb. */
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

type Options = NonNullable<ParseArgsConfig['options']>;

export interface Parsed<O extends Options> {
  values: { [K in keyof O]?: O[K] extends { multiple: true } ? string[] : O[K] extends { type: 'boolean' } ? boolean : string };
  positionals: string[];
}

/** parseArgs with strict options; every failure is a UsageError carrying `usage`. */
export function parse<O extends Options>(argv: string[], options: O, usage: string, positionals: { min?: number; max?: number } = {}): Parsed<O> {
  let r;
  try {
    r = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message.split('\n')[0] ?? 'bad arguments', usage);
  }
  const n = r.positionals.length;
  if (positionals.min !== undefined && n < positionals.min) throw new UsageError('missing argument', usage);
  if (positionals.max !== undefined && n > positionals.max) throw new UsageError(`unexpected argument ${JSON.stringify(r.positionals[positionals.max])}`, usage);
  return r as unknown as Parsed<O>;
}

export function numberFlag(name: string, v: string | undefined, usage: string, integer = false): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name}: must be ${integer ? 'an integer' : 'a number'}, got ${JSON.stringify(v)}`, usage);
  }
  return n;
}

/** Repeated `K=V` flags → a record. */
export function kvFlags(name: string, list: string[] | undefined, usage: string): Record<string, string> | undefined {
  if (!list?.length) return undefined;
  const out: Record<string, string> = {};
  for (const item of list) {
    const i = item.indexOf('=');
    if (i <= 0) throw new UsageError(`--${name}: expected K=V, got ${JSON.stringify(item)}`, usage);
    out[item.slice(0, i)] = item.slice(i + 1);
  }
  return out;
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
