import { mkdir, readFile, readdir, realpath, rmdir, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SandboxError } from '../../core/index.js';

/**
 * cgroup v1 access for one sandbox. runsc puts the sandbox's processes (sentry and gofer) in the OCI
 * `cgroupsPath` under every controller, so freezing that cgroup stops the whole sandbox at once without
 * paying a runsc CLI start (~40 ms) per pause.
 */
export const CGROUP_ROOT = '/sys/fs/cgroup';

export function cgroupPath(sandboxId: string): string {
  return `/berth/${sandboxId}`;
}

/**
 * cpu.shares of the cgroup every sandbox lives under (/berth), against 1024 for the server (a process at the
 * cgroup root, nice 0). CPU shares only count when the CPU is contended: then the server still gets about
 * four fifths of a core however many sandboxes are busy, so the API answers and a restart re-adopts
 * quickly (thirty busy ptrace sandboxes on two cores kept a restarting server from its first log line for
 * 30 s), while the sandboxes keep every cycle the server does not use.
 */
export const SANDBOXES_CPU_SHARES = 256;

/** Sets SANDBOXES_CPU_SHARES on /berth (made if missing; runsc makes each sandbox's group below it). */
export async function setSandboxesShares(): Promise<void> {
  const dir = `${CGROUP_ROOT}/cpu/berth`;
  await mkdir(dir, { recursive: true });
  await writeFile(`${dir}/cpu.shares`, String(SANDBOXES_CPU_SHARES));
}

const path = (controller: string, sandboxId: string, file: string) => `${CGROUP_ROOT}/${controller}${cgroupPath(sandboxId)}/${file}`;

export async function freeze(sandboxId: string): Promise<void> {
  await setFreezer(sandboxId, 'FROZEN');
}
export async function thaw(sandboxId: string): Promise<void> {
  await setFreezer(sandboxId, 'THAWED');
}

async function setFreezer(sandboxId: string, want: 'FROZEN' | 'THAWED'): Promise<void> {
  const file = path('freezer', sandboxId, 'freezer.state');
  try {
    // As runc does: cgroup v1 freezes the tasks present when FROZEN is written, so a sandbox that keeps
    // forking (a shell loop starting `sleep`) can stay FREEZING forever under load. Writing FROZEN again
    // catches the newcomers; an occasional thaw lets a task stuck mid-fork finish. About 2 s in all.
    for (let i = 0; i < 1000; i++) {
      if (want === 'FROZEN' && i % 50 === 49) {
        await writeFile(file, 'THAWED');
        await sleep(10);
      }
      if (i === 0 || want === 'FROZEN') await writeFile(file, want);
      const s = (await readFile(file, 'utf8')).trim();
      if (s === want) return;
      if (i > 10) await sleep(1);
    }
  } catch (e) {
    throw new SandboxError(`cannot set ${want} on sandbox ${sandboxId}: ${(e as Error).message}`, { cause: e });
  }
  throw new SandboxError(`sandbox ${sandboxId} did not become ${want}`);
}

export async function freezerState(sandboxId: string): Promise<string | undefined> {
  return (await readFile(path('freezer', sandboxId, 'freezer.state'), 'utf8').catch(() => undefined))?.trim();
}

export interface CgroupStats {
  cpuSeconds: number;
  memoryBytes: number;
  peakMemoryBytes: number;
}

export async function readStats(sandboxId: string): Promise<CgroupStats> {
  const num = async (controller: string, file: string) => Number((await readFile(path(controller, sandboxId, file), 'utf8').catch(() => '0')).trim()) || 0;
  const [cpuNs, mem, peak] = await Promise.all([
    num('cpuacct', 'cpuacct.usage'),
    num('memory', 'memory.usage_in_bytes'),
    num('memory', 'memory.max_usage_in_bytes'),
  ]);
  return { cpuSeconds: cpuNs / 1e9, memoryBytes: mem, peakMemoryBytes: peak };
}

/**
 * Why the kernel stopped the sandbox, if it was its memory limit: the memory cgroup counts OOM kills
 * (`oom_kill` in memory.oom_control). Undefined when none happened or the cgroup is gone.
 */
export async function oomKilled(sandboxId: string): Promise<{ limitBytes: number } | undefined> {
  const text = await readFile(path('memory', sandboxId, 'memory.oom_control'), 'utf8').catch(() => '');
  const kills = Number(/^oom_kill (\d+)$/m.exec(text)?.[1] ?? 0);
  if (kills === 0) return undefined;
  const limit = Number((await readFile(path('memory', sandboxId, 'memory.limit_in_bytes'), 'utf8').catch(() => '0')).trim()) || 0;
  return { limitBytes: limit };
}

/** The cgroup v1 hierarchies mounted (cpu and cpuacct are usually one, under two names). */
async function hierarchies(): Promise<string[]> {
  const names = await readdir(CGROUP_ROOT).catch(() => [] as string[]);
  return [...new Set(await Promise.all(names.map((n) => realpath(`${CGROUP_ROOT}/${n}`).catch(() => `${CGROUP_ROOT}/${n}`))))];
}

/** Every task in the sandbox's cgroup (sentry, gofer, the sentry's stubs), from the controllers runsc uses. */
export async function cgroupPids(sandboxId: string): Promise<number[]> {
  const pids = new Set<number>();
  for (const c of ['freezer', 'memory', 'pids']) {
    const text = await readFile(path(c, sandboxId, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const l of text.split('\n')) if (/^\d+$/.test(l.trim())) pids.add(Number(l.trim()));
  }
  return [...pids];
}

/**
 * Removes the sandbox's cgroup under every hierarchy (runsc does so on delete, but not for a sandbox it
 * no longer knows). A cgroup with tasks cannot be removed: returns those left.
 */
export async function removeCgroups(sandboxId: string): Promise<string[]> {
  const left: string[] = [];
  for (const h of await hierarchies()) {
    const dir = `${h}${cgroupPath(sandboxId)}`;
    try {
      await rmdir(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') left.push(dir);
    }
  }
  return left;
}

/**
 * What a checkpoint image of the sandbox can hold at most, bytes: its anonymous memory and its shared
 * memory (the sentry's memory file, which also backs the in-memory overlay), without the host's page cache
 * of files the gofer read (the base image), which is not saved.
 */
export async function imageBound(sandboxId: string): Promise<number> {
  const text = await readFile(path('memory', sandboxId, 'memory.stat'), 'utf8').catch(() => '');
  const field = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
  return field('total_rss') + field('total_shmem');
}
