import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { copyFile, open, readFile, rename } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { abortError, InvalidArgumentError, SandboxError, UnavailableError } from '../../core/index.js';

/**
 * The host-side pieces of a QEMU machine that are not QMP: qemu-img for disk layers, starting QEMU
 * detached from the server, and what /proc says about a QEMU process.
 */

export const QEMU_BINARY = 'qemu-system-x86_64';
export const QEMU_IMG = 'qemu-img';

/** Runs qemu-img; rejects with its stderr on failure. */
export function qemuImg(args: readonly string[], signal?: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(QEMU_IMG, args, { stdio: ['ignore', 'pipe', 'pipe'], signal });
    let out = '';
    let err = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr.on('data', (b: Buffer) => (err += b.toString()));
    p.on('error', (e) => reject(new UnavailableError(`${QEMU_IMG} could not run (apt-get install qemu-utils): ${e.message}`, { cause: e })));
    p.on('close', (code) => (code === 0 ? resolve(out) : reject(new SandboxError(`${QEMU_IMG} ${args[0]} failed: ${err.trim()}`))));
  });
}

/**
 * A new, empty qcow2 layer over a read-only raw base disk. With `diskMb` past the image's free room, the layer's
 * disk is larger than the base (layerSize) and the guest's agent grows the root filesystem to it at boot
 * (agent/c/disk.c); less than the image's room is refused.
 */
export async function createLayer(baseDisk: string, layer: string, opts: { diskMb?: number; signal?: AbortSignal } = {}): Promise<void> {
  const size = opts.diskMb === undefined ? undefined : layerSize(await ext4Room(baseDisk), opts.diskMb);
  await qemuImg(['create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', baseDisk, layer, ...(size ? [String(size)] : [])], opts.signal);
}

/** An ext4 image's size and its free room (every free block: the guest's processes run as root), bytes, from its superblock. */
export async function ext4Room(disk: string): Promise<{ sizeBytes: number; freeBytes: number }> {
  const fh = await open(disk, 'r');
  try {
    const sb = Buffer.alloc(1024);
    await fh.read(sb, 0, 1024, 1024);
    if (sb.readUInt16LE(0x38) !== 0xef53) throw new SandboxError(`${disk} holds no ext4 filesystem`);
    const blockSize = 1024 << sb.readUInt32LE(0x18);
    const wide = (sb.readUInt32LE(0x60) & 0x80) !== 0; // INCOMPAT_64BIT: the counts have high halves
    const count = (lo: number, hi: number) => sb.readUInt32LE(lo) + (wide ? sb.readUInt32LE(hi) * 2 ** 32 : 0);
    return { sizeBytes: (await fh.stat()).size, freeBytes: count(0x0c, 0x158) * blockSize };
  } finally {
    await fh.close();
  }
}

/**
 * Copies a qcow2 layer (copy_file_range; a reflink where the filesystem has them) and, when the base disk
 * now lives at another path than the one recorded in the layer, points it there (`rebase -u` only
 * rewrites the header: the caller has checked it is the same base by its build id).
 */
export async function copyLayer(from: string, to: string, opts: { baseDisk: string; recordedBase: string; signal?: AbortSignal }): Promise<void> {
  await copyFile(from, to);
  if (opts.recordedBase !== opts.baseDisk) await qemuImg(['rebase', '-u', '-f', 'qcow2', '-F', 'raw', '-b', opts.baseDisk, to], opts.signal);
}

/** Moves a file, copying when source and target are on different filesystems. */
export async function moveFile(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EXDEV') throw e;
    await copyFile(from, to);
  }
}

/**
 * Starts QEMU in its own session (setsid), stdout/stderr to logFile, not waited for by this process:
 * it outlives a server restart, and the next server adopts it by its pid file and sockets. Resolves once
 * the process exists; `exited` settles when it ends while this process is still around.
 */
export function spawnDetached(argv: readonly string[], logFile: string): { pid: number; exited: Promise<{ code: number | null; signal: string | null }> } {
  const log = openSync(logFile, 'a');
  try {
    const p = spawn(QEMU_BINARY, argv, { detached: true, stdio: ['ignore', log, log] });
    if (p.pid === undefined) throw new UnavailableError(`${QEMU_BINARY} could not be started (apt-get install qemu-system-x86)`);
    p.unref();
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => {
      p.on('exit', (code, signal) => resolve({ code, signal }));
      p.on('error', () => resolve({ code: null, signal: null }));
    });
    return { pid: p.pid, exited };
  } finally {
    closeSync(log);
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** True when pid is a live QEMU whose command line names `marker` (its QMP socket path): not a reused pid. */
export async function isOurQemu(pid: number, marker: string): Promise<boolean> {
  try {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8');
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // A zombie (state Z) is dead for our purposes: it only waits for its parent to reap it.
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && cmdline.split('\0').some((a) => a.includes(marker));
  } catch {
    return false;
  }
}

/** Waits until pid is gone (or a zombie), polling; false when it is still there after timeoutMs. */
export async function waitGone(pid: number, marker: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (await isOurQemu(pid, marker)) {
    if (Date.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

/** Reads QEMU's pid file; undefined when missing or unreadable. */
export async function readPid(pidFile: string): Promise<number | undefined> {
  const n = Number((await readFile(pidFile, 'utf8').catch(() => '')).trim());
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

/** CPU seconds (user+system) and resident/peak memory of a process, from /proc. */
export async function procStats(pid: number): Promise<{ cpuSeconds: number; rssBytes: number; hwmBytes: number }> {
  const [stat, status] = await Promise.all([readFile(`/proc/${pid}/stat`, 'utf8'), readFile(`/proc/${pid}/status`, 'utf8')]);
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(f[11]) + Number(f[12]);
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  // USER_HZ is 100 on every Linux architecture Node runs on (sysconf(_SC_CLK_TCK) is not exposed).
  return { cpuSeconds: ticks / 100, rssBytes: kb('VmRSS'), hwmBytes: kb('VmHWM') };
}

/** The last lines of a log file, for error messages. */
export async function logTail(file: string, lines = 8): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1bc/g, '')
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(-lines)
    .join(' | ');
}

/** Connects a unix socket, retrying briefly while it does not exist yet. */
export async function connectUnix(path: string, signal: AbortSignal): Promise<Socket> {
  for (;;) {
    if (signal.aborted) throw abortError(signal);
    const s = await new Promise<Socket | undefined>((resolve) => {
      const c = connect(path);
      c.once('connect', () => {
        c.removeAllListeners('error');
        resolve(c);
      });
      c.once('error', () => {
        c.destroy();
        resolve(undefined);
      });
    });
    if (s) return s;
    await sleep(5);
  }
}

/** dist/agent/berth-agent of this package, where `npm run build` puts the agent. */
export function defaultAgentPath(): string {
  return join(packageRoot(), 'dist', 'agent', 'berth-agent');
}

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new UnavailableError(`package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  return dir;
}

const MIB = 1024 * 1024;
/** MiB of inode tables and bitmaps ext4 adds per MiB it grows by (mkfs's defaults: a 256-byte inode per 16 KiB), rounded up. */
const GROW_OVERHEAD = 1.02;

/**
 * The size of a session's disk layer for `diskMb` MiB of free room over an image with `room` (ext4Room), bytes:
 * undefined when the image's own room is what was asked (or no room was); InvalidArgumentError, naming the
 * image's room, when less was asked (a guest's filesystem cannot shrink below its image).
 */
export function layerSize(room: { sizeBytes: number; freeBytes: number }, diskMb: number | undefined): number | undefined {
  if (diskMb === undefined) return undefined;
  const freeMb = Math.floor(room.freeBytes / MIB);
  if (diskMb < freeMb) {
    throw new InvalidArgumentError(`diskMb: a QEMU session's disk has at least its image's free room, ${freeMb} MiB (it can be grown, not shrunk); got ${diskMb}`, {
      details: { field: 'diskMb', min: freeMb },
    });
  }
  if (diskMb === freeMb) return undefined;
  const grow = Math.ceil(((diskMb - freeMb) * GROW_OVERHEAD) / 16) * 16;
  return room.sizeBytes + grow * MIB;
}
