/**
 * `berth VERB …`: dispatch through one verb table. Each verb lives in its own thin file (parse, call the
 * SDK, report) and is loaded only when used, so `berth exec` never loads the server.
 *
 * Exit status: the verb's (for exec, the command's; 124 on --timeout); 1 on an error, printed as
 * `berth: <code>: <message>`; 2 on a usage error (EXIT_CODES in usage.ts, the README's table). Stacks are
 * printed only with BERTH_DEBUG=1. Verbs, subcommands and flags come from one table (commands.ts).
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isAppError } from '../core/errors.js';
import type { Berth } from '../sdk/index.js';
import { GLOBAL_FLAGS, VERB_NAMES, verbSpec, type VerbName, type VerbSpec } from './commands.js';
import { UsageError, parseCommand, usageOf, type Io, type Verb, type VerbContext } from './common.js';
import { packageVersion } from '../server/version.js';
import { clientFromEnv, debugEnabled } from './env.js';
import { didYouMean, topHelp, verbHelp, verbUsage } from './usage.js';

/**
 * How each verb of the table (commands.ts) is loaded. Typed by the table's keys: a verb in the table without
 * a loader, or a loader without a table entry, does not compile.
 */
export const LOADERS: Record<VerbName, () => Promise<Verb>> = {
  serve: async () => (await import('./serve.js')).run,
  session: async () => (await import('./session.js')).run,
  exec: async () => (await import('./exec.js')).run,
  files: async () => (await import('./files.js')).run,
  pause: async () => (await import('./lifecycle.js')).lifecycle('pause'),
  resume: async () => (await import('./lifecycle.js')).lifecycle('resume'),
  hibernate: async () => (await import('./lifecycle.js')).lifecycle('hibernate'),
  wake: async () => (await import('./lifecycle.js')).lifecycle('wake'),
  snapshot: async () => (await import('./snapshot.js')).run,
  fork: async () => (await import('./fork.js')).run,
  tenant: async () => (await import('./tenant.js')).run,
  audit: async () => (await import('./audit.js')).run,
  tools: async () => (await import('./tools.js')).run,
  call: async () => (await import('./call.js')).run,
  policy: async () => (await import('./policy.js')).run,
  plan: async () => (await import('./plan.js')).run,
  approvals: async () => (await import('./approvals.js')).list,
  approve: async () => (await import('./approvals.js')).approve,
  deny: async () => (await import('./approvals.js')).deny,
  breaker: async () => (await import('./breaker.js')).run,
  console: async () => (await import('./console.js')).run,
  control: async () => (await import('./control.js')).run,
  'watch-link': async () => (await import('./watch-link.js')).run,
  tool: async () => (await import('./tool.js')).run,
  gate: async () => (await import('./gate.js')).run,
  mcp: async () => (await import('./mcp.js')).run,
  ps: async () => (await import('./processes.js')).ps,
  logs: async () => (await import('./processes.js')).logs,
  kill: async () => (await import('./processes.js')).kill,
  template: async () => (await import('./template.js')).run,
  'port-forward': async () => (await import('./port-forward.js')).run,
  'port-link': async () => (await import('./port-link.js')).run,
  shell: async () => (await import('./terminal.js')).shell,
  terminal: async () => (await import('./terminal.js')).terminal,
  desktop: async () => (await import('./desktop.js')).run,
  demo: async () => (await import('./demo.js')).run,
  completion: async () => (await import('./completion.js')).run,
  help: async () => helpVerb,
};

const processIo = (): Io => ({ stdout: process.stdout, stderr: process.stderr, stdin: process.stdin });

/** `berth help [VERB]`. */
async function helpVerb(ctx: VerbContext): Promise<number> {
  const { positionals } = parseCommand('help', '', ctx.argv);
  const verb = positionals[0];
  if (verb === undefined) ctx.io.stdout.write(topHelp());
  else if (verbSpec(verb)) ctx.io.stdout.write(verbHelp(verb));
  else throw unknownVerb(verb);
  return 0;
}

function unknownVerb(verb: string): UsageError {
  return new UsageError(`${JSON.stringify(verb)} is not a berth command${didYouMean(verb, VERB_NAMES)}`, 'berth help');
}

/** Which of the verb's commands argv names: a subcommand (or alias), else the verb's own ('' ). */
function resolveSub(verb: string, spec: VerbSpec, argv: string[]): { sub: string; argv: string[] } {
  const named = Object.keys(spec.commands).filter((k) => k !== '');
  const first = argv[0];
  const canonical = first === undefined ? undefined : named.includes(first) ? first : spec.aliases?.[first];
  if (canonical !== undefined) return { sub: canonical, argv: argv.slice(1) };
  if ('' in spec.commands) return { sub: '', argv };
  const usage = verbUsage(verb, spec);
  if (first === undefined) throw new UsageError(`berth ${verb}: missing subcommand (${named.join(', ')})`, usage);
  throw new UsageError(`berth ${verb}: unknown subcommand ${JSON.stringify(first)}${didYouMean(first, named)}`, usage);
}

/** --help or -h before any `--`: the verb's help instead of running it. */
function wantsHelp(argv: string[]): boolean {
  const dd = argv.indexOf('--');
  return (dd >= 0 ? argv.slice(0, dd) : argv).some((a) => a === '--help' || a === '-h');
}

/** Runs one command line and returns the exit status; never throws. */
export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const [verb, ...rest] = argv;
  try {
    if (verb === undefined) {
      io.stderr.write(topHelp());
      return 2;
    }
    if (verb === '--help' || verb === '-h') {
      io.stdout.write(topHelp());
      return 0;
    }
    if (verb === '--version' || verb === '-V' || verb === 'version') {
      io.stdout.write(`berth ${packageVersion()}\n`);
      return 0;
    }
    if (verb.startsWith('-')) throw new UsageError(`unknown flag ${verb}${didYouMean(verb.replace(/^-+/, ''), Object.keys(GLOBAL_FLAGS), (s) => `--${s}`)} (flags go after the verb)`, 'berth VERB [ARGS…]');
    const spec = verbSpec(verb);
    if (!spec) throw unknownVerb(verb);
    if (wantsHelp(rest)) {
      io.stdout.write(verbHelp(verb));
      return 0;
    }
    const { sub, argv: args } = resolveSub(verb, spec, rest);
    let client: Berth | undefined;
    const ctx: VerbContext = { sub, argv: args, io, client: () => (client ??= clientFromEnv()) };
    return await (await LOADERS[verb as VerbName]())(ctx);
  } catch (e) {
    return report(e, io, verb);
  }
}

function report(e: unknown, io: Io, verb: string | undefined): number {
  const usage = usageOf(e);
  if (isAppError(e)) io.stderr.write(`berth: ${e.code}: ${e.message}\n`);
  else io.stderr.write(`berth: internal: ${e instanceof Error ? e.message : String(e)}\n`);
  if (usage) io.stderr.write(`usage: ${usage}\n${verb && verbSpec(verb) ? `(berth ${verb} --help for more)\n` : ''}`);
  if (debugEnabled() && e instanceof Error && e.stack) io.stderr.write(`${e.stack}\n`);
  return usage ? 2 : 1;
}

/** Runs and exits once stdout and stderr are flushed (open sockets or stdin must not keep us alive). */
export async function run(argv: string[] = process.argv.slice(2)): Promise<never> {
  // A reader that goes away (`berth files read … | head`) ends us quietly, as it does other tools.
  for (const s of [process.stdout, process.stderr]) {
    s.on('error', (e: NodeJS.ErrnoException) => process.exit(e.code === 'EPIPE' ? 141 : 1));
  }
  const code = await main(argv);
  await Promise.all([flush(process.stdout), flush(process.stderr)]);
  process.exit(code);
}

function flush(s: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (s.destroyed || !s.writable) return resolve();
    s.write('', () => resolve());
  });
}

function isEntry(): boolean {
  if (!process.argv[1]) return false;
  try {
    return realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isEntry()) void run();
