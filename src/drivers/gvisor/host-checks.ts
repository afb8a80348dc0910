import { readFile, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { NoSpaceError } from '../../core/index.js';
import { cgroupPids, imageBound } from './cgroup.js';

/** What the gVisor driver learns about a sandbox from the host alone (files, cgroups, /proc), without runsc. */

/** Room kept free beyond the estimate of a checkpoint image, bytes: runsc's own metadata and slack. */
const IMAGE_MARGIN_BYTES = 64 << 20;

/**
 * Throws NoSpaceError when the image directory's filesystem has less free room than the image can take
 * (see imageBound: the application's pages and, with the overlay in memory, its written files).
 */
export async function ensureRoom(sandboxId: string, imageDir: string): Promise<void> {
  const need = (await imageBound(sandboxId)) + IMAGE_MARGIN_BYTES;
  const fs = await statfs(imageDir).catch(() => undefined);
  if (!fs) return;
  const free = fs.bavail * fs.bsize;
  if (free < need) {
    const mb = (n: number) => Math.round(n / (1 << 20));
    throw new NoSpaceError(`not enough room for the checkpoint image in ${imageDir}: about ${mb(need)} MB needed, ${mb(free)} MB free`, {
      details: { imageDir, neededBytes: need, freeBytes: free },
    });
  }
}

/** Why a frozen sandbox is dead, or undefined while it lives: no task left, or SIGKILL pending in one. */
export async function pausedDeath(sandboxId: string): Promise<string | undefined> {
  const pids = await cgroupPids(sandboxId);
  if (pids.length === 0) return 'the sandbox died while paused';
  for (const pid of pids) {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    // SigPnd (this thread) and ShdPnd (the process): bit 8 is SIGKILL (signal 9).
    for (const m of status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)) {
      if ((BigInt(`0x${m[1]}`) & 0x100n) !== 0n) return 'the sandbox was killed while paused (SIGKILL pending in the frozen sandbox)';
    }
  }
  return undefined;
}

/**
 * A running sandbox from runsc's state file (`<id>_sandbox:<id>.state`: `status`, `sandbox.pid`) and a live
 * runsc process at that pid; undefined whenever the file does not settle it (then `runsc state` decides).
 * The agent handshake that follows in adopt() is the proof that the machine answers.
 */
export async function runningFromStateFile(root: string, sandboxId: string): Promise<{ status: string; pid: number } | undefined> {
  try {
    const file = join(root, `${sandboxId}_sandbox:${sandboxId}.state`);
    const s = JSON.parse(await readFile(file, 'utf8')) as { id?: string; status?: string; sandbox?: { pid?: number } };
    const pid = s.sandbox?.pid;
    if (s.id !== sandboxId || s.status !== 'running' || typeof pid !== 'number' || pid <= 0) return undefined;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
    if (!cmdline.includes(`--root=${root}`)) return undefined;
    return { status: 'running', pid };
  } catch {
    return undefined;
  }
}

