/**
 * `npm run crashloop [-- --rounds 20] [-- --sessions 30] [-- --seed N] [-- --max-minutes 30] [-- --json]`:
 * kills a real `berth serve` at random points of its work, restarts it and checks that nothing was lost.
 *
 * It keeps a pool of `--sessions` running sessions (each with a counter process). Each round starts one
 * operation at random (create, exec, files write, hibernate, wake, snapshot, fork, approve, terminate),
 * kills the server 0–800 ms into it in one of three ways (SIGKILL of the server pid; SIGINT or SIGKILL of its
 * whole process group, as Ctrl-C or a supervisor would), starts it again on the same data directory and
 * checks:
 *   - lost: a session the server had acknowledged is gone, `failed`, or (when running) its counter stopped
 *     or a file it acknowledged reads back different;
 *   - orphans: runsc processes, runsc state files or snapshot directories under the data directory that no
 *     session or snapshot record owns;
 *   - failed startups: the server did not come back;
 *   - restart time: spawn to "ready" (recovery, with every sandbox re-adopted, runs before it).
 * At the end every session is terminated and the directory must hold no sandbox at all.
 *
 * Needs root and runsc. Loopback only; stops by itself. Exits 1 when anything was lost or orphaned or a
 * startup failed.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Berth, type Session } from '../src/sdk/index.js';
import { killGroup, startServerProcess, stopServerProcess, StartupError, type ServerProcess } from './server-process.js';
import { percentile } from './stats.js';

interface Options {
  rounds: number;
  sessions: number;
  seed: number;
  maxMinutes: number;
  json: boolean;
}

const OPS = ['create', 'exec', 'write', 'hibernate', 'wake', 'snapshot', 'fork', 'approve', 'terminate'] as const;
type Op = (typeof OPS)[number];
const KILLS = ['pid-SIGKILL', 'group-SIGINT', 'group-SIGKILL'] as const;
type Kill = (typeof KILLS)[number];

// Written aside and renamed: a read between the truncate and the write of `echo $i > /tmp/n` saw "" (read as 0).
// Once a second: at ten a second, thirty ptrace'd sandboxes forking `mv` and `sleep` (6-11 ms each here)
// asked for about 2.4 cores of this 2-core host by themselves, and every restart measured that, not Berth.
const COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.w; mv /tmp/n.w /tmp/n; sleep 1; done' >/dev/null 2>&1 < /dev/null &";

function parseArgs(argv: string[]): Options {
  const o: Options = { rounds: 20, sessions: 30, seed: Date.now() % 100_000, maxMinutes: 30, json: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i] as string;
    if (flag === '--json') {
      o.json = true;
      continue;
    }
    const key = { '--rounds': 'rounds', '--sessions': 'sessions', '--seed': 'seed', '--max-minutes': 'maxMinutes' }[flag] as 'rounds' | 'sessions' | 'seed' | 'maxMinutes' | undefined;
    const n = Number(argv[++i]);
    if (!key || !Number.isInteger(n) || n < (key === 'seed' ? 0 : 1)) {
      throw new Error(`bad flag ${flag} ${argv[i] ?? ''}; usage: crashloop [--rounds N] [--sessions N] [--seed N] [--max-minutes M] [--json]`);
    }
    o[key] = n;
  }
  return o;
}

/** mulberry32: a seeded generator, so a failing run can be repeated with its --seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** What the client was told: sessions it was given and files whose write it saw acknowledged. */
interface Ledger {
  sessions: Set<string>;
  files: Map<string, { path: string; sha: string }>;
}

interface RoundResult {
  round: number;
  op: Op;
  kill: Kill;
  afterMs: number;
  restartMs?: number;
  lost: string[];
  orphans: string[];
  startupFailed?: string;
}

const sha = (b: Uint8Array | string) => createHash('sha256').update(b).digest('hex');

/** Every process whose command line names this data directory (runsc, its sandbox and gofer, QEMU). */
function processesUnder(dataDir: string): { pid: number; args: string }[] {
  const out: { pid: number; args: string }[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let args = '';
    try {
      args = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').join(' ');
    } catch {
      continue;
    }
    if (args.includes(`${dataDir}/`) && !args.includes(' serve ')) out.push({ pid: Number(d), args });
  }
  return out;
}

function runscStateIds(dataDir: string): string[] {
  const dir = join(dataDir, 'gvisor', 'runsc');
  return existsSync(dir) ? readdirSync(dir).flatMap((f) => /^(.+)_sandbox:(.+)\.state$/.exec(f)?.slice(2, 3) ?? []) : [];
}

async function orphansOf(berth: Berth, dataDir: string): Promise<string[]> {
  const all = await berth.sessions.list({ states: ['creating', 'running', 'paused', 'hibernating', 'hibernated', 'waking', 'failed'] });
  const live = all.filter((s) => s.info.state === 'running' || s.info.state === 'paused').map((s) => s.id);
  const owns = (text: string) => live.some((id) => text.includes(id));
  const found: string[] = [];
  for (const p of processesUnder(dataDir)) if (!owns(p.args)) found.push(`process ${p.pid}: ${p.args.slice(0, 160)}`);
  for (const id of runscStateIds(dataDir)) if (!owns(id)) found.push(`runsc state ${id}`);
  const snapDir = join(dataDir, 'snapshots');
  const dirs = existsSync(snapDir) ? readdirSync(snapDir).filter((d) => !d.startsWith('.')) : [];
  const named = new Set((await berth.snapshots.list()).map((s) => s.id));
  const hibernated = all.filter((s) => ['hibernating', 'hibernated', 'waking'].includes(s.info.state)).length;
  const unowned = dirs.filter((d) => !named.has(d));
  // A hibernated session owns one image that the list of named snapshots does not show.
  if (unowned.length > hibernated) found.push(`${unowned.length - hibernated} snapshot directories no record owns (${unowned.join(', ')})`);
  return found;
}

async function counter(s: Session): Promise<number> {
  return Number((await s.run(['cat', '/tmp/n'])).stdout.toString().trim());
}

/** The checks after a restart: every acknowledged session is there and alive; nothing is orphaned. */
async function check(berth: Berth, ledger: Ledger, dataDir: string): Promise<{ lost: string[]; orphans: string[] }> {
  const lost: string[] = [];
  const byId = new Map((await berth.sessions.list({ states: ['creating', 'running', 'paused', 'hibernating', 'hibernated', 'waking', 'failed', 'terminated'] })).map((s) => [s.id, s]));
  for (const id of ledger.sessions) {
    const s = byId.get(id);
    if (!s) {
      lost.push(`${id}: gone`);
      continue;
    }
    const state = s.info.state;
    if (state === 'terminated') {
      ledger.sessions.delete(id);
      continue;
    }
    if (state === 'failed') {
      lost.push(`${id}: failed (${s.info.failureReason ?? 'no reason'})`);
      ledger.sessions.delete(id);
      continue;
    }
    if (state !== 'running') continue;
    try {
      // A tick a second, and thirty ptrace'd sandboxes on two cores: give it seconds, not 250 ms.
      const a = await counter(s);
      let b = a;
      for (const until = Date.now() + 10_000; !(b > a) && Date.now() < until; ) {
        await sleep(250);
        b = await counter(s);
      }
      if (!(b > a)) lost.push(`${id}: its counter process stopped (${a} → ${b} in 10 s)`);
      const f = ledger.files.get(id);
      if (f && sha(await s.files.readBytes(f.path)) !== f.sha) lost.push(`${id}: ${f.path} reads back different`);
    } catch (e) {
      lost.push(`${id}: ${(e as Error).message}`);
    }
  }
  return { lost, orphans: await orphansOf(berth, dataDir) };
}

async function adopt(berth: Berth, ledger: Ledger, s: Session): Promise<void> {
  ledger.sessions.add(s.id);
  await s.run(['sh', '-c', COUNTER]);
  void berth;
}

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)] as T;
}

/** Starts `op` on the pool; resolves (or rejects) when the server answers or dies. */
async function operate(berth: Berth, ledger: Ledger, op: Op, r: () => number): Promise<void> {
  const ids = [...ledger.sessions];
  const one = async (states: string[]) => {
    for (const id of ids.sort(() => r() - 0.5)) {
      const s = await berth.sessions.get(id).catch(() => undefined);
      if (s && states.includes(s.info.state)) return s;
    }
    return undefined;
  };
  switch (op) {
    case 'create':
      return adopt(berth, ledger, await berth.sessions.create({ objective: 'crashloop' }));
    case 'exec': {
      const s = await one(['running']);
      if (s) await s.run(['sh', '-c', 'head -c 8000000 /dev/urandom | sha256sum; sleep 1']);
      return;
    }
    case 'write': {
      const s = await one(['running']);
      if (!s) return;
      const data = new Uint8Array(8 << 20).map((_, i) => (i * 31 + ids.length) & 0xff);
      const path = `/root/f-${Math.floor(r() * 1e9)}`;
      await s.files.write(path, data);
      ledger.files.set(s.id, { path, sha: sha(data) });
      return;
    }
    case 'hibernate': {
      const s = await one(['running']);
      if (s) await s.hibernate();
      return;
    }
    case 'wake': {
      const s = await one(['hibernated']);
      if (s) await s.wake();
      return;
    }
    case 'snapshot': {
      const s = await one(['running']);
      if (s) await s.snapshot({ name: `cl-${Math.floor(r() * 1e9)}` });
      return;
    }
    case 'fork': {
      const snaps = await berth.snapshots.list();
      const snap = snaps.length ? pick(r, snaps) : undefined;
      if (!snap) return;
      for (const s of await berth.snapshots.fork(snap.id, { count: 2 })) ledger.sessions.add(s.id);
      return;
    }
    case 'approve': {
      const s = await one(['running']);
      if (!s) return;
      const res = await berth.tools.call(s.id, 'http.request', { method: 'POST', url: 'http://127.0.0.1:9/crashloop', body: 'x' });
      if (res.decision === 'pending') await berth.approvals.approve(res.approvalId).catch(() => undefined);
      return;
    }
    case 'terminate': {
      const s = await one(['running', 'paused', 'hibernated']);
      if (s) {
        ledger.sessions.delete(s.id);
        ledger.files.delete(s.id);
        await s.terminate();
      }
      return;
    }
  }
}

/** Sessions an interrupted create or fork made before the server died: they are the pool's too. */
async function adoptUnknown(berth: Berth, ledger: Ledger): Promise<void> {
  for (const s of await berth.sessions.list({ states: ['running'] })) {
    if (ledger.sessions.has(s.id)) continue;
    await adopt(berth, ledger, s).catch(() => undefined);
  }
}

async function fill(berth: Berth, ledger: Ledger, n: number): Promise<void> {
  while (ledger.sessions.size < n) {
    const batch = Math.min(4, n - ledger.sessions.size);
    await Promise.all(Array.from({ length: batch }, async () => adopt(berth, ledger, await berth.sessions.create({ objective: 'crashloop' }))));
  }
}

/** Kills what no server is left to stop: sandboxes under the data directory, then the directory. */
async function scrub(dataDir: string): Promise<void> {
  for (const id of runscStateIds(dataDir)) {
    spawnSync('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/berth/${id}/freezer.state`], { timeout: 5000 });
    spawnSync('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'delete', '--force', id], { timeout: 30_000 });
  }
  for (const p of processesUnder(dataDir)) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
}

/** Where a restart's time went, from the server's JSON log: recovery's own elapsedMs and what it did. */
function startupTimeline(out: string): string {
  const rec = /\{[^\n]*"msg":"recovered"[^\n]*/.exec(out)?.[0];
  if (!rec) return 'no recovery line';
  const n = (k: string) => new RegExp(`"${k}":(\\d+)`).exec(rec)?.[1];
  const adopted = /"adopted":(\d+)/.exec(rec)?.[1];
  const ts = (re: RegExp) => {
    const line = re.exec(out)?.[0];
    const t = line ? /"ts":"([^"]+)"/.exec(line)?.[1] : undefined;
    return t ? Date.parse(t) : NaN;
  };
  const first = ts(/^\{"ts"[^\n]*/m);
  const ready = ts(/\{[^\n]*"msg":"ready"[^\n]*/);
  return `first log line to ready ${Math.round(ready - first)} ms, recovery ${n('elapsedMs') ?? '?'} ms for ${adopted ?? '?'} adopted`;
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const r = rng(o.seed);
  const deadline = Date.now() + o.maxMinutes * 60_000;
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-crashloop-'));
  const say = (line: string) => (o.json ? process.stderr : process.stdout).write(`${line}\n`);
  say(`crashloop: ${o.rounds} rounds, ${o.sessions} sessions, seed ${o.seed}, data ${dataDir}`);
  const ledger: Ledger = { sessions: new Set(), files: new Map() };
  const results: RoundResult[] = [];
  let server: ServerProcess | undefined;
  let finalOrphans: string[] = [];
  try {
    server = await startServerProcess({ dataDir });
    let berth = new Berth({ url: server.url, token: server.token });
    await fill(berth, ledger, o.sessions);
    for (let round = 1; round <= o.rounds && Date.now() < deadline; round++) {
      const op = pick(r, OPS);
      const kill = pick(r, KILLS);
      const afterMs = Math.floor(r() * 800);
      const work = operate(berth, ledger, op, r).catch(() => undefined);
      await sleep(afterMs);
      if (kill === 'pid-SIGKILL') server.child.kill('SIGKILL');
      else killGroup(server.child, kill === 'group-SIGINT' ? 'SIGINT' : 'SIGKILL');
      await Promise.race([server.exited, sleep(60_000)]);
      if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill('SIGKILL');
      await server.exited;
      await work;
      const res: RoundResult = { round, op, kill, afterMs, lost: [], orphans: [] };
      results.push(res);
      try {
        server = await startServerProcess({ dataDir, port: Number(new URL(server.url).port) });
      } catch (e) {
        res.startupFailed = `${(e as Error).message}${e instanceof StartupError ? `: ${e.output.slice(-600)}` : ''}`;
        say(`round ${round}: ${op} killed by ${kill} after ${afterMs} ms: STARTUP FAILED ${res.startupFailed}`);
        // Count it and go on with a server that does start, if one can.
        server = await startServerProcess({ dataDir });
      }
      res.restartMs = server.startMs;
      berth = new Berth({ url: server.url, token: server.token });
      const c = await check(berth, ledger, dataDir);
      res.lost = c.lost;
      res.orphans = c.orphans;
      say(`round ${round}: ${op} killed by ${kill} after ${afterMs} ms; restart ${Math.round(res.restartMs)} ms (${ledger.sessions.size} sessions; ${startupTimeline(server.stdout())}); lost ${c.lost.length}, orphans ${c.orphans.length}${[...c.lost, ...c.orphans].map((x) => `\n    ${x}`).join('')}`);
      await adoptUnknown(berth, ledger);
      await fill(berth, ledger, o.sessions);
    }
    for (const s of await berth.sessions.list({ states: ['creating', 'running', 'paused', 'hibernated', 'failed'] })) await s.terminate().catch(() => undefined);
    for (const s of await berth.snapshots.list()) await berth.snapshots.delete(s.id).catch(() => undefined);
    const verify = await berth.audit.verify();
    if (!verify.ok) finalOrphans.push(`audit verify: ${JSON.stringify(verify)}`);
    await stopServerProcess(server);
    finalOrphans = [...finalOrphans, ...processesUnder(dataDir).map((p) => `process ${p.pid} after the end: ${p.args.slice(0, 160)}`), ...runscStateIds(dataDir).map((id) => `runsc state ${id} after the end`)];
  } finally {
    if (server) await stopServerProcess(server, 10_000).catch(() => undefined);
    await scrub(dataDir);
  }
  const restarts = results.flatMap((x) => (x.restartMs === undefined ? [] : [x.restartMs]));
  const summary = {
    rounds: results.length,
    seed: o.seed,
    sessions: o.sessions,
    sessionsLost: results.reduce((n, x) => n + x.lost.length, 0),
    orphans: results.reduce((n, x) => n + x.orphans.length, 0) + finalOrphans.length,
    failedStartups: results.filter((x) => x.startupFailed).length,
    restartP50Ms: Math.round(percentile(restarts, 50)),
    restartP95Ms: Math.round(percentile(restarts, 95)),
  };
  for (const x of finalOrphans) say(`at the end: ${x}`);
  say(`crashloop: ${summary.rounds} rounds, ${summary.sessionsLost} sessions lost, ${summary.orphans} orphans, ${summary.failedStartups} failed startups, restart p50 ${summary.restartP50Ms} ms p95 ${summary.restartP95Ms} ms (${o.sessions} sessions), seed ${o.seed}`);
  if (o.json) process.stdout.write(`${JSON.stringify(summary)}\n`);
  process.exitCode = summary.sessionsLost + summary.orphans + summary.failedStartups > 0 ? 1 : 0;
}

main().catch((e: unknown) => {
  console.error(`crashloop: ${(e as Error).stack ?? String(e)}`);
  process.exit(2);
});
