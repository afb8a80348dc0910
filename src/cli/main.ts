/**
 * `berth VERB …`: dispatch through one verb table. Each verb lives in its own thin file (parse, call the
 * SDK, report) and is loaded only when used, so `berth exec` never loads the server.
 *
 * Exit status: the verb's (for exec, the command's; 124 on --timeout); 1 on an error, printed as
 * `berth: <code>: <message>`; 2 on a usage error. Stacks are printed only with BERTH_DEBUG=1.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isAppError } from '../core/errors.js';
import type { Berth } from '../sdk/index.js';
import { UsageError, usageOf, type Io, type Verb, type VerbContext } from './common.js';
import { clientFromEnv, debugEnabled } from './env.js';

interface VerbEntry {
  summary: string;
  load(): Promise<Verb>;
}

/** The verb table. Gate verbs (tools, call, policy, plan, approvals, approve, deny, mcp, demo) go here too. */
export const VERBS: Record<string, VerbEntry> = {
  serve: { summary: 'run the API server', load: async () => (await import('./serve.js')).run },
  session: { summary: 'create | list | show | rm sessions', load: async () => (await import('./session.js')).run },
  exec: { summary: 'run a command in a session', load: async () => (await import('./exec.js')).run },
  files: { summary: 'write | read | list | stat | mkdir | rm files in a session', load: async () => (await import('./files.js')).run },
  pause: { summary: 'freeze a session (memory kept)', load: async () => (await import('./lifecycle.js')).lifecycle('pause') },
  resume: { summary: 'unfreeze a paused session', load: async () => (await import('./lifecycle.js')).lifecycle('resume') },
  hibernate: { summary: 'checkpoint a session to disk and free its RAM', load: async () => (await import('./lifecycle.js')).lifecycle('hibernate') },
  wake: { summary: 'restore a hibernated session', load: async () => (await import('./lifecycle.js')).lifecycle('wake') },
  snapshot: { summary: 'snapshot a session (or list | show | rm snapshots)', load: async () => (await import('./snapshot.js')).run },
  fork: { summary: 'start N sessions from a snapshot', load: async () => (await import('./fork.js')).run },
  tenant: { summary: 'create | list tenants (root only)', load: async () => (await import('./tenant.js')).run },
  audit: { summary: 'query, verify or export the audit log', load: async () => (await import('./audit.js')).run },
  tools: { summary: "list a session's tools (what its agent may call)", load: async () => (await import('./tools.js')).run },
  call: { summary: 'call a tool through the gate (exit 0 allow, 3 deny, 4 pending)', load: async () => (await import('./call.js')).run },
  policy: { summary: "set | show the tenant's Cedar policy", load: async () => (await import('./policy.js')).run },
  plan: { summary: "set | show | clear a session's plan", load: async () => (await import('./plan.js')).run },
  approvals: { summary: 'list approvals', load: async () => (await import('./approvals.js')).list },
  approve: { summary: 'approve a parked call (it runs at once)', load: async () => (await import('./approvals.js')).approve },
  deny: { summary: 'deny a parked call', load: async () => (await import('./approvals.js')).deny },
  breaker: { summary: "reset a session's tripped breaker", load: async () => (await import('./breaker.js')).run },
  tool: { summary: 'define | list operator tools', load: async () => (await import('./tool.js')).run },
  gate: { summary: "set | show a session's gate settings", load: async () => (await import('./gate.js')).run },
  mcp: { summary: "serve a session's tools over MCP on stdio", load: async () => (await import('./mcp.js')).run },
  demo: { summary: 'run the Plan-then-Execute scenario against the server', load: async () => (await import('./demo.js')).run },
};

function help(): string {
  const w = Math.max(...Object.keys(VERBS).map((k) => k.length));
  const lines = Object.entries(VERBS).map(([k, v]) => `  ${k.padEnd(w)}  ${v.summary}`);
  return [
    'usage: berth VERB [ARGS…]',
    '',
    ...lines,
    '',
    'Environment: BERTH_URL (default http://127.0.0.1:7070), BERTH_TOKEN (else $BERTH_DATA/root.key; BERTH_DATA default ./.berth).',
    '',
  ].join('\n');
}

const processIo = (): Io => ({ stdout: process.stdout, stderr: process.stderr, stdin: process.stdin });

/** Runs one command line and returns the exit status; never throws. */
export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const [verb, ...rest] = argv;
  try {
    if (verb === undefined || verb === 'help' || verb === '--help' || verb === '-h') {
      (verb === undefined ? io.stderr : io.stdout).write(help());
      return verb === undefined ? 2 : 0;
    }
    const entry = Object.hasOwn(VERBS, verb) ? VERBS[verb] : undefined;
    if (!entry) throw new UsageError(`unknown verb ${JSON.stringify(verb)}`, 'berth help');
    let client: Berth | undefined;
    const ctx: VerbContext = { argv: rest, io, client: () => (client ??= clientFromEnv()) };
    return await (await entry.load())(ctx);
  } catch (e) {
    return report(e, io);
  }
}

function report(e: unknown, io: Io): number {
  const usage = usageOf(e);
  if (isAppError(e)) io.stderr.write(`berth: ${e.code}: ${e.message}\n`);
  else io.stderr.write(`berth: internal: ${e instanceof Error ? e.message : String(e)}\n`);
  if (usage) io.stderr.write(`usage: ${usage}\n`);
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
