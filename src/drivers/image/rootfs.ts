import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { canonicalJson, sha256Hex, UnavailableError, SandboxError } from '../../core/index.js';
import { withDirLock } from './lock.js';

/**
 * The base root filesystem every session starts from: a minimal Debian built with debootstrap from
 * Debian's own packages. It is read-only to sessions (gVisor overlays their writes in memory; QEMU puts
 * a qcow2 layer over a disk image made from it) and shared by all of them. It is rebuilt only when the
 * recipe changes, because the directory name is the recipe's hash.
 */
export interface RootfsRecipe {
  suite: string;
  variant: string;
  /** Extra Debian packages. */
  include: readonly string[];
  mirror: string;
}

export const DEFAULT_ROOTFS_RECIPE: RootfsRecipe = Object.freeze({
  suite: 'bookworm',
  variant: 'minbase',
  // What a coding agent reaches for first (README "What is in the image"). debootstrap installs their
  // Depends, not their Recommends, so the image stays small.
  include: Object.freeze([
    'python3', 'python3-pip', 'python3-venv', 'procps', 'ca-certificates', 'git', 'curl', 'make', 'less',
    'unzip', 'xz-utils', 'jq', 'vim-tiny',
  ]),
  mirror: 'http://deb.debian.org/debian',
});

/**
 * The desktop variant (issue 11): the base image plus a virtual X display (Xvfb), a light window manager
 * (openbox), a VNC server (x11vnc), the input and screenshot tools computer-use agents expect (xdotool,
 * scrot), Tk for Python GUI applications, fonts, and ffmpeg for session recordings. All from Debian. No
 * xterm: under gVisor its child cannot open the PTY slave (EIO), so it never maps a window.
 */
export const DESKTOP_ROOTFS_RECIPE: RootfsRecipe = Object.freeze({
  ...DEFAULT_ROOTFS_RECIPE,
  include: Object.freeze([
    ...DEFAULT_ROOTFS_RECIPE.include,
    'xvfb', 'xauth', 'x11-utils', 'x11-xserver-utils', 'openbox', 'x11vnc', 'xdotool', 'scrot', 'python3-tk',
    'fonts-dejavu-core', 'xfonts-base', 'ffmpeg',
  ]),
});

/** Bump when the post-processing below changes, so cached images are rebuilt. */
const POSTPROCESS_VERSION = 2;

export function rootfsKey(recipe: RootfsRecipe): string {
  return sha256Hex(canonicalJson({ ...recipe, post: POSTPROCESS_VERSION })).slice(0, 16);
}

export interface EnsureRootfsOptions {
  /** Directory holding cached images. */
  cacheDir: string;
  recipe?: RootfsRecipe;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
  /** Every output line of the build as it comes (debootstrap's `I: Retrieving …`), for a progress display. */
  progress?: (line: string) => void;
}

/**
 * The root filesystem as one read-only EROFS image beside its directory (`rootfs-<key>.erofs`), which gVisor
 * reads inside its own kernel instead of through the gofer. runsc 0.0~20240729 answers lgetxattr on a
 * gofer-backed symlink with EBADF, so `ls -l` of any symlink of the image (/bin, /usr/bin/python3) prints
 * "Bad file descriptor"; from the EROFS image it does not.
 */
export function rootfsImagePath(rootfsDir: string): string {
  return `${rootfsDir}.erofs`;
}

/** Returns the path of the built root filesystem, building it (and its EROFS image) first when missing. */
export async function ensureRootfs(opts: EnsureRootfsOptions): Promise<string> {
  const recipe = opts.recipe ?? DEFAULT_ROOTFS_RECIPE;
  const key = rootfsKey(recipe);
  const dir = join(opts.cacheDir, `rootfs-${key}`);
  const complete = () => existsSync(join(dir, '.berth-complete')) && existsSync(rootfsImagePath(dir));
  if (complete()) return dir;
  await mkdir(opts.cacheDir, { recursive: true });
  return withDirLock(join(opts.cacheDir, `rootfs-${key}.lock`), async () => {
    if (complete()) return dir;
    if (existsSync(join(dir, '.berth-complete'))) {
      await buildErofs(dir, opts.log); // a directory cached before the image existed
      return dir;
    }
    if (!existsSync('/usr/sbin/debootstrap')) {
      throw new UnavailableError('debootstrap is not installed: run `apt-get install -y debootstrap` (as root)');
    }
    const tmp = `${dir}.tmp-${process.pid}`;
    await removeBuildDir(tmp);
    opts.log?.(`building base image (Debian ${recipe.suite} ${recipe.variant}) into ${dir}; this takes about a minute, once`);
    const args = [`--variant=${recipe.variant}`, `--include=${recipe.include.join(',')}`, recipe.suite, tmp, recipe.mirror];
    try {
      await run('/usr/sbin/debootstrap', args, opts.log, opts.progress);
      await postprocess(tmp);
    } catch (e) {
      await removeBuildDir(tmp);
      throw e;
    }
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    await buildErofs(dir, opts.log);
    opts.log?.('base image ready');
    return dir;
  });
}

/** Writes rootfsImagePath(dir) from dir, atomically (a temporary file renamed into place). */
async function buildErofs(dir: string, log?: (l: string) => void): Promise<void> {
  if (!existsSync('/usr/bin/mkfs.erofs')) {
    throw new UnavailableError('mkfs.erofs is not installed: run `apt-get install -y erofs-utils` (as root)');
  }
  const out = rootfsImagePath(dir);
  const tmp = `${out}.tmp-${process.pid}`;
  log?.(`writing the base image as EROFS into ${out}`);
  try {
    // Without inline (tail-packed) data: gVisor's EROFS cannot map a file whose tail is inline ("bad address").
    await run('/usr/bin/mkfs.erofs', ['--quiet', '-E', 'noinline_data', tmp, dir], log);
    await rename(tmp, out);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/**
 * Removes a (possibly half-built) rootfs. debootstrap mounts /proc and /sys inside its target; a build
 * interrupted mid-way leaves them mounted, and rm would fail with EBUSY, so unmount them first.
 */
async function removeBuildDir(dir: string): Promise<void> {
  const mounts = (await readFile('/proc/mounts', 'utf8').catch(() => ''))
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m === dir || m.startsWith(dir + '/'))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  await rm(dir, { recursive: true, force: true });
}

/** What every session's root needs beyond a plain debootstrap. */
async function postprocess(root: string): Promise<void> {
  // Identity files are written per session by the agent; the image ships none of its own.
  await writeFile(join(root, 'etc/machine-id'), '');
  await writeFile(join(root, 'etc/hostname'), 'berth\n');
  await writeFile(join(root, 'etc/hosts'), '127.0.0.1 localhost\n::1 localhost\n');
  await mkdir(join(root, 'run/berth'), { recursive: true });
  await mkdir(join(root, 'opt/berth/bin'), { recursive: true });
  await rm(join(root, 'var/cache/apt/archives'), { recursive: true, force: true });
  await mkdir(join(root, 'var/cache/apt/archives/partial'), { recursive: true });
  await writeFile(join(root, '.berth-complete'), new Date().toISOString() + '\n');
}

function run(cmd: string, args: string[], log?: (l: string) => void, progress?: (l: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    const onData = (b: Buffer) => {
      const text = b.toString();
      if (progress) for (const l of text.split('\n')) if (l.trim()) progress(l);
      tail = (tail + text).slice(-4000);
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', onData);
    p.on('error', (e) => reject(new SandboxError(`${cmd} failed to start: ${e.message}`, { cause: e })));
    p.on('close', (code) => {
      if (code === 0) resolve();
      else {
        log?.(tail);
        reject(new SandboxError(`${cmd} ${args.join(' ')} exited with ${code}: ${tail.split('\n').slice(-5).join(' | ')}`));
      }
    });
  });
}
