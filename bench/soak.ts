/**
 * `npm run soak [-- --runs 3] [-- --calls 7000] [-- --node PATH] [-- --max-minutes 30]`: the load under which
 * Node 20 aborted inside V8 (issue 7 §10), against a real `berth serve` process on 127.0.0.1.
 *
 * One run: a fresh data directory and server process; 4 clients make `--calls` gated calls over HTTP between
 * them, binding a plan and clearing it every few calls; sessions are created four at a time (one wave per
 * round, `--rounds` rounds) and terminated at the end of their round. A run is an abort when the server exits
 * before it is told to stop; its exit code or signal and the tail of its stderr are printed.
 *
 *   --runs N         runs to make (default 3); fewer when --max-minutes runs out first
 *   --calls N        gated calls per run, over all clients (default 7000)
 *   --clients N      concurrent clients, each with its own session per round (default 4)
 *   --rounds N       session waves per run (default 5)
 *   --node PATH      the Node binary that runs the server (default: the one running this script). Node 24 or
 *                    newer: bin/berth moves an older Node onto the pinned one, and better-sqlite3 is built
 *                    for that. To measure Node 20, run this script from a checkout whose node_modules and
 *                    bin/berth predate the move (as the figures in the README were taken).
 *   --max-minutes M  wall-time budget for all runs (default 30); a run over budget is stopped and counted
 *
 * Exits 0 when no run aborted, 1 otherwise. Loopback only; stops by itself.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Berth } from '../src/sdk/index.js';
import { startServerProcess, type ServerProcess } from './server-process.js';

interface SoakOptions {
  runs: number;
  calls: number;
  clients: number;
  rounds: number;
  node: string;
  maxMinutes: number;
}

interface RunResult {
  ok: boolean;
  /** The time budget ran out during the run: neither a pass nor an abort, and not counted. */
  stopped?: boolean;
  calls: number;
  /** Denied calls by `stage/code`. */
  denied: Record<string, number>;
  seconds: number;
  p50Ms: number;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
  stderrTail?: string;
  error?: string;
}


class BudgetError extends Error {
  constructor() {
    super('the time budget (--max-minutes) ran out');
  }
}
const TAIL = 4000;

function parseArgs(argv: string[]): SoakOptions {
  const o: SoakOptions = { runs: 3, calls: 7000, clients: 4, rounds: 5, node: process.execPath, maxMinutes: 30 };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i] as string;
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${flag}: missing value`);
    i++;
    if (flag === '--node') o.node = value;
    else if (['--runs', '--calls', '--clients', '--rounds', '--max-minutes'].includes(flag)) {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${flag}: must be a positive integer, got ${JSON.stringify(value)}`);
      const key = flag === '--max-minutes' ? 'maxMinutes' : (flag.slice(2) as 'runs' | 'calls' | 'clients' | 'rounds');
      o[key] = n;
    } else throw new Error(`unknown flag ${flag}; usage: soak [--runs N] [--calls N] [--clients N] [--rounds N] [--node PATH] [--max-minutes M]`);
  }
  return o;
}

type Server = ServerProcess;

async function startServer(node: string, dataDir: string): Promise<Server> {
  return startServerProcess({ node, dataDir });
}

const PLAN = {
  objective: 'look around the machine',
  steps: [
    { id: 'look', tool: 'fs.list', repeatable: true, arguments: { type: 'object', properties: { path: { type: 'string', pattern: '^/' } }, required: ['path'] } },
    { id: 'read', tool: 'fs.read', repeatable: true, arguments: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
  ],
};

/** One client's share of a round: gated calls on its session, a plan bound and cleared every few calls. */
async function clientLoop(berth: Berth, sessionId: string, calls: number, seed: number, times: number[], denials: Map<string, number>): Promise<void> {
  for (let i = 0; i < calls; i++) {
    const k = (i + seed) % 7;
    if (k === 0) await berth.plans.set(sessionId, PLAN);
    else if (k === 5) await berth.plans.clear(sessionId);
    const t0 = performance.now();
    const tool = i % 3 === 2 ? 'fs.read' : 'fs.list';
    const r = await berth.tools.call(sessionId, tool, tool === 'fs.read' ? { path: '/etc/hostname' } : { path: '/root' });
    times.push(performance.now() - t0);
    if (r.decision === 'deny') denials.set(`${r.stage}/${r.code}`, (denials.get(`${r.stage}/${r.code}`) ?? 0) + 1);
  }
}

async function load(server: Server, o: SoakOptions, deadline: number): Promise<{ calls: number; denied: Record<string, number>; times: number[] }> {
  const berth = new Berth({ url: server.url, token: server.token });
  const times: number[] = [];
  const denials = new Map<string, number>();
  const perRound = Math.ceil(o.calls / o.rounds / o.clients);
  for (let r = 0; r < o.rounds && times.length < o.calls; r++) {
    if (Date.now() > deadline) throw new BudgetError();
    const sessions = await Promise.all(Array.from({ length: o.clients }, () => berth.sessions.create({ objective: 'soak', memoryMb: 256 })));
    // The rate breaker (120 calls a minute by default) would pause the session and refuse most of the load.
    await Promise.all(sessions.map((s) => berth.gate.set(s.id, { breaker: { perMinute: 100_000 } })));
    try {
      const left = o.calls - times.length;
      const counts = sessions.map((_, c) => Math.max(0, Math.min(perRound, left - c * perRound)));
      await Promise.all(sessions.map((s, c) => clientLoop(berth, s.id, counts[c] ?? 0, c + r, times, denials)));
    } finally {
      await Promise.all(sessions.map((s) => s.terminate().catch(() => undefined)));
    }
  }
  return { calls: times.length, denied: Object.fromEntries(denials), times };
}

/** After an abort the sandboxes outlive the server: a second server re-adopts them and terminates each one. */
async function reclaim(node: string, dataDir: string): Promise<void> {
  try {
    const s = await startServer(node, dataDir);
    const berth = new Berth({ url: s.url, token: s.token });
    for (const x of await berth.sessions.list()) await x.terminate().catch(() => undefined);
    s.child.kill('SIGTERM');
    await s.exited;
  } catch (e) {
    console.error(`[soak] reclaim failed, forcing runsc delete: ${(e as Error).message}`);
    const root = join(dataDir, 'gvisor', 'runsc');
    const ids = existsSync(root) ? readdirSync(root).flatMap((f) => /^(.+)_sandbox:(.+)\.state$/.exec(f)?.slice(2, 3) ?? []) : [];
    for (const id of ids) spawnSync('runsc', [`--root=${root}`, 'delete', '--force', id], { timeout: 30_000 });
  }
}

async function oneRun(o: SoakOptions, deadline: number): Promise<RunResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-soak-'));
  const t0 = performance.now();
  let server: Server | undefined;
  let aborted: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  try {
    server = await startServer(o.node, dataDir);
    const s = server;
    const died = s.exited.then((x) => {
      aborted = x;
      throw new Error(`server exited (code ${x.code}, signal ${x.signal})`);
    });
    const work = load(s, o, deadline);
    let res: Awaited<typeof work>;
    try {
      res = await Promise.race([work, died]);
    } catch (e) {
      // A connection error can come a moment before the exit event; give the exit a chance to be seen.
      await Promise.race([s.exited, sleep(2000)]);
      if (aborted) return { ok: false, calls: 0, denied: {}, seconds: (performance.now() - t0) / 1000, p50Ms: 0, exit: aborted, stderrTail: s.stderr().slice(-TAIL) };
      throw e;
    }
    died.catch(() => undefined);
    const sorted = [...res.times].sort((a, b) => a - b);
    return { ok: true, calls: res.calls, denied: res.denied, seconds: (performance.now() - t0) / 1000, p50Ms: sorted[Math.floor(sorted.length / 2)] ?? 0 };
  } catch (e) {
    if (e instanceof BudgetError) return { ok: false, stopped: true, calls: 0, denied: {}, seconds: (performance.now() - t0) / 1000, p50Ms: 0 };
    return { ok: false, calls: 0, denied: {}, seconds: (performance.now() - t0) / 1000, p50Ms: 0, error: (e as Error).message, stderrTail: server?.stderr().slice(-TAIL) };
  } finally {
    if (server && !aborted && server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill('SIGTERM');
      await Promise.race([server.exited, sleep(30_000)]);
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill('SIGKILL');
    }
    if (aborted || !server) await reclaim(o.node, dataDir);
    await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const version = spawnSync(o.node, ['--version'], { encoding: 'utf8' }).stdout.trim();
  const deadline = Date.now() + o.maxMinutes * 60_000;
  console.log(`soak: server on Node ${version} (${o.node}); ${o.runs} runs of ${o.calls} gated calls, ${o.clients} clients, ${o.rounds} session waves`);
  const results: RunResult[] = [];
  for (let i = 1; i <= o.runs && Date.now() < deadline; i++) {
    const r = await oneRun(o, deadline);
    if (r.stopped) {
      console.log(`run ${i}: stopped after ${r.seconds.toFixed(1)} s, the time budget ran out (not counted)`);
      break;
    }
    results.push(r);
    if (r.ok) console.log(`run ${i}: ok, ${r.calls} calls (denied: ${JSON.stringify(r.denied)}) in ${r.seconds.toFixed(1)} s, call p50 ${r.p50Ms.toFixed(1)} ms`);
    else if (r.exit) console.log(`run ${i}: ABORT after ${r.seconds.toFixed(1)} s: exit code ${r.exit.code}, signal ${r.exit.signal}\n--- stderr tail ---\n${r.stderrTail ?? ''}\n---`);
    else console.log(`run ${i}: FAILED (no abort) after ${r.seconds.toFixed(1)} s: ${r.error}${r.stderrTail ? `\n--- stderr tail ---\n${r.stderrTail}\n---` : ''}`);
  }
  const aborts = results.filter((r) => r.exit).length;
  const failed = results.filter((r) => !r.ok && !r.exit).length;
  console.log(`soak: Node ${version}: ${results.length} runs, ${aborts} aborts, ${failed} other failures`);
  process.exit(aborts + failed > 0 ? 1 : 0);
}

main().catch((e: unknown) => {
  console.error(`soak failed: ${(e as Error).stack ?? String(e)}`);
  process.exit(1);
});
