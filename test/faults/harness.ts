/**
 * What the fault tests share: a real `berth serve` process in its own process group (as a terminal or a
 * supervisor starts it; see bench/server-process.ts), and an inventory of everything a data directory's
 * sandboxes leave on the host (processes, cgroups, runsc state, sandbox directories), read from /proc,
 * /sys/fs/cgroup and the directory itself rather than from Berth, so a test sees what Berth might miss.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, realpathSync, rmdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { killGroup, startServerProcess, type ServerProcess } from '../../bench/server-process.js';
import { Berth, type Session } from '../../src/sdk/index.js';

export { killGroup, startServerProcess, stopServerProcess, type ServerProcess } from '../../bench/server-process.js';

/** A counter inside the sandbox, detached from the exec that starts it: proof that processes survive. */
export const COUNTER = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.w; mv /tmp/n.w /tmp/n; sleep 0.05; done' >/dev/null 2>&1 </dev/null &";

export async function counter(s: Session): Promise<number> {
  return Number((await s.run(['cat', '/tmp/n'])).stdout.toString().trim());
}

/** True when the session's counter process still runs (it advances within a second). */
export async function counterRuns(s: Session): Promise<boolean> {
  const a = await counter(s);
  for (let i = 0; i < 20; i++) {
    await sleep(100);
    if ((await counter(s)) > a) return true;
  }
  return false;
}

export async function tempDataDir(tag: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `berth-fault-${tag}-`));
}

export function client(s: ServerProcess): Berth {
  return new Berth({ url: s.url, token: s.token });
}

export interface HostProcess {
  pid: number;
  pgid: number;
  sid: number;
  args: string;
}

function procInfo(pid: string): HostProcess | undefined {
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command: state ppid pgrp session ...
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (f[0] === 'Z') return undefined; // a zombie holds nothing but its pid
    return { pid: Number(pid), pgid: Number(f[2]), sid: Number(f[3]), args };
  } catch {
    return undefined;
  }
}

/** Every runsc process (sandbox, gofer, CLI) and QEMU process of this data directory, from /proc. */
export function sandboxProcesses(dataDir: string): HostProcess[] {
  const out: HostProcess[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const p = procInfo(d);
    if (p && p.args.includes(`${dataDir}/`) && !/\bserve\b/.test(p.args)) out.push(p);
  }
  return out;
}

/** Sandbox ids runsc keeps state for under this data directory. */
export function runscStateIds(dataDir: string): string[] {
  const dir = join(dataDir, 'gvisor', 'runsc');
  return existsSync(dir) ? readdirSync(dir).flatMap((f) => /^(.+)_sandbox:(.+)\.state$/.exec(f)?.slice(2, 3) ?? []) : [];
}

/** Sandbox directories (bundle, FIFOs) under this data directory. */
export function sandboxDirs(dataDir: string): string[] {
  const dir = join(dataDir, 'gvisor', 'sandboxes');
  return existsSync(dir) ? readdirSync(dir) : [];
}

/** The cgroup v1 hierarchies mounted here (cpu and cpuacct are usually links to one). */
const CONTROLLERS = existsSync('/sys/fs/cgroup') ? [...new Set(readdirSync('/sys/fs/cgroup').map((c) => realpathSync(`/sys/fs/cgroup/${c}`)))] : [];

/** cgroup directories left for any of these sandbox ids (runsc makes one per controller). */
export function cgroupsOf(sandboxIds: Iterable<string>): string[] {
  const out: string[] = [];
  for (const id of sandboxIds) {
    for (const c of CONTROLLERS) {
      const p = `${c}/berth/${id}`;
      if (existsSync(p)) out.push(p);
    }
  }
  return out;
}

/**
 * Everything of this data directory's sandboxes still on the host, as lines (empty: nothing left), except
 * what `owned` claims (it sees a process's whole command line, a state file's or cgroup's sandbox id).
 */
export function leftovers(dataDir: string, sandboxIds: Iterable<string> = [], owned: (text: string) => boolean = () => false): string[] {
  return [
    ...sandboxProcesses(dataDir).filter((p) => !owned(p.args)).map((p) => `process ${p.pid}: ${p.args.slice(0, 140)}`),
    ...runscStateIds(dataDir).filter((id) => !owned(id)).map((id) => `runsc state ${id}`),
    ...sandboxDirs(dataDir).filter((id) => !owned(id)).map((id) => `sandbox directory ${id}`),
    ...cgroupsOf(sandboxIds).filter((c) => !owned(c)).map((p) => `cgroup ${p}`),
  ];
}

/** Kills what no server is left to stop, then removes the data directory. For afterAll/finally. */
export async function scrub(dataDir: string): Promise<void> {
  if (!dataDir) return;
  const ids = new Set([...runscStateIds(dataDir), ...sandboxDirs(dataDir)]);
  for (const id of ids) {
    spawnSync('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/berth/${id}/freezer.state`], { timeout: 5000 });
    spawnSync('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'delete', '--force', id], { timeout: 30_000 });
  }
  for (const p of sandboxProcesses(dataDir)) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  await sleep(200);
  for (const c of cgroupsOf(ids)) {
    try {
      rmdirSync(c);
    } catch {
      // busy or gone
    }
  }
  await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
}

/** Waits for the server process to exit (killing it after `ms`). */
export async function exited(s: ServerProcess, ms = 60_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const r = await Promise.race([s.exited, sleep(ms).then(() => undefined)]);
  if (r) return r;
  s.child.kill('SIGKILL');
  return s.exited;
}

/**
 * Starts `op`, SIGKILLs the server's whole process group `afterMs` into it (what a supervisor's kill does),
 * waits for both, and starts a new server on the same data directory.
 */
export async function killDuring(server: ServerProcess, dataDir: string, afterMs: number, op: () => Promise<unknown>): Promise<ServerProcess> {
  const pending = op().catch(() => undefined);
  await sleep(afterMs);
  killGroup(server.child, 'SIGKILL');
  await exited(server);
  await pending;
  return startServerProcess({ dataDir });
}

export type { Session };

const ALL_STATES = ['creating', 'running', 'paused', 'hibernating', 'hibernated', 'waking', 'failed', 'terminated'] as const;

/**
 * What is left on the host that no running or paused session owns: processes, runsc state, sandbox
 * directories and cgroups (of any generation of any session the server knows).
 */
export async function orphans(berth: Berth, dataDir: string): Promise<string[]> {
  const all = await berth.sessions.list({ states: [...ALL_STATES] });
  const live = all.filter((s) => s.info.state === 'running' || s.info.state === 'paused').map((s) => s.id);
  const owns = (text: string) => live.some((id) => text.includes(id));
  const candidates = all.flatMap((s) => Array.from({ length: 12 }, (_, g) => `${s.id}-g${g + 1}`));
  return leftovers(dataDir, candidates, owns);
}
