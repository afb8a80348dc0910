import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, readFile, readdir, rename, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { canonicalJson, sha256Hex, SandboxError, UnavailableError } from '../../core/index.js';
import { type CpioEntry, cpioNewc } from './guest-cpio.js';
import { type KernelPin, downloadKernel, extractDeb, extractVmlinux, moduleLoadOrder, runCommand } from './guest-kernel.js';
import { withDirLock } from './lock.js';
import { DEFAULT_ROOTFS_RECIPE, DESKTOP_ROOTFS_RECIPE, type RootfsRecipe, ensureRootfs, rootfsKey } from './rootfs.js';

/**
 * The QEMU guest image: a Debian kernel, a small initramfs that loads the drivers that kernel ships as
 * modules and mounts the session's disk, and a read-only ext4 base disk made from the shared Debian root
 * filesystem (rootfs.ts). Every session boots the same three files; its writes go to a qcow2 layer of its
 * own over the base disk (drivers/qemu).
 *
 * The image lives in <cacheDir>/guest-<key>/ and is rebuilt only when its recipe changes. The kernel
 * package is pinned: the first build records the version apt resolved (guest-pin-<recipe>.json), and the
 * key hashes recipe and pin, so a newer kernel on the mirror never silently changes an existing image.
 */
export interface GuestRecipe {
  /**
   * Debian kernel metapackage, resolved by apt at the first build. Default linux-image-amd64: the generic
   * flavour, because it is built with CONFIG_VMGENID=y and reseeds its random pool when QEMU's vmgenid
   * device reports a restore; the cloud flavour boots faster but lacks VMGENID (see drivers/qemu/machine.ts).
   */
  kernelPackage: string;
  /** Modules the initramfs loads (dependencies are added), by name. */
  modules: readonly string[];
  /** Size of the base disk's ext4 filesystem, MiB (a sparse file: unused space costs nothing). */
  diskSizeMb: number;
  rootfs: RootfsRecipe;
}

export const DEFAULT_GUEST_RECIPE: GuestRecipe = Object.freeze({
  kernelPackage: 'linux-image-amd64',
  // virtio_pci: the bus of every device; virtio_blk: the disk; virtio_console: the agent's port;
  // virtio_rng: entropy from the host at boot; ext4 and crc32c (ext4's metadata checksums; a soft
  // dependency modinfo does not list) for the root filesystem.
  modules: Object.freeze(['virtio_pci', 'virtio_blk', 'virtio_console', 'virtio_rng', 'crc32c_generic', 'ext4']),
  diskSizeMb: 4096,
  rootfs: DEFAULT_ROOTFS_RECIPE,
});

/**
 * The desktop variant (issue 11): the same kernel and initramfs over a disk made from the desktop root
 * filesystem. That tree takes about 960 MB against the base's 370 MB, so the disk is 2 GiB larger and a
 * session keeps more free space than on the base image (about 5 GiB against 3.7).
 */
export const DESKTOP_GUEST_RECIPE: GuestRecipe = Object.freeze({
  ...DEFAULT_GUEST_RECIPE,
  diskSizeMb: 6144,
  rootfs: DESKTOP_ROOTFS_RECIPE,
});

/** Bump when the build below (init script, layout, mkfs options) changes, so cached images are rebuilt. */
const BUILD_VERSION = 3;

/** Where the agent's virtio-serial port appears in the guest; the machine names the port `berth.0`. */
export const GUEST_AGENT_PORT = 'berth.0';
/** Path of the agent inside the initramfs (appended by withAgent) and, copied to a tmpfs, in the guest. */
const AGENT_IN_INITRD = 'berth-agent';

export interface GuestImage {
  key: string;
  dir: string;
  /** Kernel to boot: an uncompressed ELF vmlinux (PVH entry) when it could be extracted, else the bzImage. */
  kernel: string;
  kernelFormat: 'elf' | 'bzImage';
  /** `uname -r` of the guest kernel. */
  kernelRelease: string;
  pin: KernelPin;
  /** The initramfs without the agent (see withAgent). */
  initrd: string;
  /** Raw ext4 image, mode 0444, shared by every session as the backing file of its qcow2 layer. */
  baseDisk: string;
  /** Random per build: a snapshot's disk layer only fits the exact base disk it was written over. */
  buildId: string;
}

export interface EnsureGuestImageOptions {
  /** Directory holding cached images (shared with rootfs.ts). Required. */
  cacheDir: string;
  recipe?: GuestRecipe;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/** A hash of what decides the image's content, apart from the kernel version (see the pin). */
export async function guestRecipeHash(recipe: GuestRecipe): Promise<string> {
  const busybox = sha256Hex(await readFile(await busyboxPath()));
  return sha256Hex(canonicalJson({ ...recipe, rootfs: rootfsKey(recipe.rootfs), busybox, build: BUILD_VERSION })).slice(0, 16);
}

/** Returns the guest image, building it first when missing (about 40 s with the root filesystem, once). */
export async function ensureGuestImage(opts: EnsureGuestImageOptions): Promise<GuestImage> {
  const recipe = opts.recipe ?? DEFAULT_GUEST_RECIPE;
  const recipeHash = await guestRecipeHash(recipe);
  const pinFile = join(opts.cacheDir, `guest-pin-${recipeHash}.json`);
  const cached = await readImage(opts.cacheDir, recipeHash, await readPin(pinFile));
  if (cached) return cached;
  await mkdir(opts.cacheDir, { recursive: true });
  return withDirLock(join(opts.cacheDir, `guest-${recipeHash}.lock`), async () => {
    const pin = await readPin(pinFile);
    const again = await readImage(opts.cacheDir, recipeHash, pin);
    if (again) return again;
    const t0 = Date.now();
    // Build directories of this recipe are only ever made under this lock: any left over are a dead build's.
    for (const name of await readdir(opts.cacheDir)) {
      if (name.startsWith(`guest-build-${recipeHash}-`)) await rm(join(opts.cacheDir, name), { recursive: true, force: true });
    }
    const work = await mkdtemp(join(opts.cacheDir, `guest-build-${recipeHash}-`));
    try {
      // The pin keeps an existing image stable; with the image gone and its kernel no longer on the mirror
      // (Debian drops superseded security updates), the recipe is pinned again to what apt has now.
      const dl = await downloadKernel({ metapackage: recipe.kernelPackage, pin, dir: work, log: opts.log }).catch((e: unknown) => {
        if (!pin) throw e;
        opts.log?.(`pinned kernel ${pin.package} ${pin.version} is not available (${(e as Error).message}); pinning again`);
        return downloadKernel({ metapackage: recipe.kernelPackage, dir: work, log: opts.log });
      });
      if (dl.pin.package !== pin?.package || dl.pin.version !== pin.version) await writeFile(pinFile, JSON.stringify(dl.pin) + '\n');
      const key = imageKey(recipeHash, dl.pin);
      const dir = join(opts.cacheDir, `guest-${key}`);
      const tmp = join(work, 'image');
      await mkdir(tmp);
      opts.log?.(`building guest image ${key} (${dl.pin.package} ${dl.pin.version}) into ${dir}`);
      const pkg = join(work, 'pkg');
      await extractDeb(dl.deb, pkg);
      const kernel = await installKernel(pkg, tmp);
      const modulesDir = join(pkg, 'lib/modules', kernel.release);
      const order = await moduleLoadOrder(modulesDir, recipe.modules);
      await writeFile(join(tmp, 'initrd.img'), await buildInitrd(modulesDir, order));
      const rootfs = await ensureRootfs({ cacheDir: opts.cacheDir, recipe: recipe.rootfs, log: opts.log });
      await buildBaseDisk(rootfs, join(tmp, 'base.img'), recipe.diskSizeMb, key);
      const meta: ImageMeta = {
        key,
        kernelFile: kernel.file,
        kernelFormat: kernel.format,
        kernelRelease: kernel.release,
        pin: dl.pin,
        buildId: randomUUID(),
        modules: order,
        builtAt: new Date().toISOString(),
        buildMs: Date.now() - t0,
      };
      await writeFile(join(tmp, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
      await rm(dir, { recursive: true, force: true });
      await rename(tmp, dir);
      opts.log?.(`guest image ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      const img = await readImage(opts.cacheDir, recipeHash, dl.pin);
      if (!img) throw new SandboxError(`guest image ${dir} vanished after its build`);
      return img;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
}

/**
 * The image's initramfs with the agent binary appended as a second cpio archive (the kernel unpacks
 * concatenated archives in order). Keeps the image independent of the agent: a rebuilt agent costs a
 * 5 MB file write, not an image rebuild. Cached beside the image, named by the agent's hash.
 */
export async function withAgent(image: GuestImage, agentPath: string): Promise<string> {
  const agent = await readFile(agentPath).catch((e: unknown) => {
    throw new UnavailableError(`berth-agent is not built at ${agentPath}: run \`npm run build\``, { cause: e });
  });
  const out = join(image.dir, `initrd-agent-${sha256Hex(agent).slice(0, 16)}.img`);
  if (existsSync(out)) return out;
  const base = await readFile(image.initrd);
  const tmp = `${out}.tmp-${process.pid}`;
  await writeFile(tmp, Buffer.concat([base, cpioNewc([{ type: 'file', path: AGENT_IN_INITRD, data: agent, mode: 0o755 }])]));
  await rename(tmp, out);
  return out;
}

// ---- internals --------------------------------------------------------------------------------------

interface ImageMeta {
  key: string;
  kernelFile: string;
  kernelFormat: 'elf' | 'bzImage';
  kernelRelease: string;
  pin: KernelPin;
  buildId: string;
  modules: string[];
  builtAt: string;
  buildMs: number;
}

function imageKey(recipeHash: string, pin: KernelPin): string {
  return sha256Hex(canonicalJson({ recipe: recipeHash, pin })).slice(0, 16);
}

async function readPin(file: string): Promise<KernelPin | undefined> {
  try {
    const p = JSON.parse(await readFile(file, 'utf8')) as KernelPin;
    return typeof p.package === 'string' && typeof p.version === 'string' ? p : undefined;
  } catch {
    return undefined;
  }
}

/** The complete image for recipe and pin, if built (meta.json is written last, inside the renamed dir). */
async function readImage(cacheDir: string, recipeHash: string, pin: KernelPin | undefined): Promise<GuestImage | undefined> {
  if (!pin) return undefined;
  const dir = join(cacheDir, `guest-${imageKey(recipeHash, pin)}`);
  const meta = await readMeta(dir);
  return meta ? imageFromMeta(dir, meta) : undefined;
}

async function readMeta(dir: string): Promise<ImageMeta | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, 'meta.json'), 'utf8')) as ImageMeta;
  } catch {
    return undefined;
  }
}

function imageFromMeta(dir: string, meta: ImageMeta): GuestImage {
  return {
    key: meta.key,
    dir,
    kernel: join(dir, meta.kernelFile),
    kernelFormat: meta.kernelFormat,
    kernelRelease: meta.kernelRelease,
    pin: meta.pin,
    initrd: join(dir, 'initrd.img'),
    baseDisk: join(dir, 'base.img'),
    buildId: meta.buildId,
  };
}

async function busyboxPath(): Promise<string> {
  for (const p of ['/bin/busybox', '/usr/bin/busybox']) {
    if (existsSync(p)) return p;
  }
  throw new UnavailableError('busybox is not installed: run `apt-get install -y busybox-static` (as root)');
}

/** Copies the kernel out of the unpacked package: as an ELF vmlinux when possible (see extractVmlinux). */
async function installKernel(pkg: string, out: string): Promise<{ file: string; format: 'elf' | 'bzImage'; release: string }> {
  const vmlinuz = (await readdir(join(pkg, 'boot'))).find((f) => f.startsWith('vmlinuz-'));
  if (!vmlinuz) throw new SandboxError('the kernel package holds no /boot/vmlinuz-*');
  const release = vmlinuz.slice('vmlinuz-'.length);
  if (await extractVmlinux(join(pkg, 'boot', vmlinuz), join(out, 'vmlinux'))) return { file: 'vmlinux', format: 'elf', release };
  await rm(join(out, 'vmlinux'), { force: true });
  await copyFile(join(pkg, 'boot', vmlinuz), join(out, 'vmlinuz'));
  return { file: 'vmlinuz', format: 'bzImage', release };
}

/**
 * Stage one of the guest's boot, run by busybox as PID 1 from the initramfs: load the modules, mount the
 * session disk, give the agent's port the name udev would, and hand PID 1 to the agent (switch_root
 * execs it in place). Everything the guest needs before the agent runs happens here, so the Debian root
 * needs no init system of its own. A failure powers the guest off, which the host sees as an exit.
 */
function initScript(): string {
  return `#!/bin/busybox sh
B=/bin/busybox
fail() { echo "berth-init: $*" >/dev/console; $B poweroff -f; }
$B mount -t proc -o nosuid,nodev,noexec proc /proc
$B mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
$B mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev
while read -r m; do $B insmod "/lib/modules/$m" || fail "insmod $m"; done </lib/modules/order
i=0
while [ ! -b /dev/vda ]; do i=$((i+1)); [ $i -gt 2000 ] && fail "no disk /dev/vda"; $B usleep 5000; done
$B mount -t ext4 -o noatime /dev/vda /newroot || fail "cannot mount /dev/vda"
$B mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /newroot/run || fail "cannot mount /run"
$B mkdir -p /newroot/run/berth /newroot/run/lock
$B cp /${AGENT_IN_INITRD} /newroot/run/berth/agent || fail "no agent in the initramfs"
port=
i=0
while [ -z "$port" ]; do
  for n in /sys/class/virtio-ports/*/name; do
    [ -r "$n" ] && [ "$($B cat "$n")" = "${GUEST_AGENT_PORT}" ] && port=$($B basename "$($B dirname "$n")")
  done
  [ -n "$port" ] && break
  i=$((i+1)); [ $i -gt 2000 ] && fail "no virtio port ${GUEST_AGENT_PORT}"; $B usleep 5000
done
$B mkdir -p /dev/virtio-ports /dev/pts /dev/shm
$B ln -sf "../$port" "/dev/virtio-ports/${GUEST_AGENT_PORT}"
$B mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=666 devpts /dev/pts
$B mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
$B ln -sf /proc/self/fd /dev/fd
$B ln -sf /proc/self/fd/0 /dev/stdin
$B ln -sf /proc/self/fd/1 /dev/stdout
$B ln -sf /proc/self/fd/2 /dev/stderr
$B ip link set lo up
$B hostname berth
$B mount --move /dev /newroot/dev
$B mount --move /sys /newroot/sys
$B mount --move /proc /newroot/proc
exec $B env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \\
  $B switch_root /newroot /run/berth/agent --device /dev/virtio-ports/${GUEST_AGENT_PORT}
`;
}

async function buildInitrd(modulesDir: string, order: readonly string[]): Promise<Buffer> {
  const entries: CpioEntry[] = [
    { type: 'dir', path: 'bin' },
    { type: 'dir', path: 'dev' },
    { type: 'char', path: 'dev/console', major: 5, minor: 1 },
    { type: 'dir', path: 'proc' },
    { type: 'dir', path: 'sys' },
    { type: 'dir', path: 'newroot' },
    { type: 'dir', path: 'lib' },
    { type: 'dir', path: 'lib/modules' },
    { type: 'file', path: 'bin/busybox', data: await readFile(await busyboxPath()), mode: 0o755 },
    { type: 'file', path: 'init', data: Buffer.from(initScript()), mode: 0o755 },
  ];
  const names: string[] = [];
  for (const rel of order) {
    const name = rel.replace(/^.*\//, '');
    names.push(name);
    entries.push({ type: 'file', path: `lib/modules/${name}`, data: stripModuleSignature(await readFile(join(modulesDir, rel))) });
  }
  entries.push({ type: 'file', path: 'lib/modules/order', data: Buffer.from(names.join('\n') + '\n') });
  // Uncompressed: unpacking it is a copy for the guest, where gunzip would cost emulated CPU at every boot.
  return cpioNewc(entries);
}

const SIG_MAGIC = Buffer.from('~Module signature appended~\n');

/**
 * Drops a module's appended signature. Debian's kernel checks signatures but does not enforce them
 * (CONFIG_MODULE_SIG_FORCE is off, no lockdown), and checking one is an RSA verification plus a SHA-256 of
 * the module in emulated CPU: about 150 ms per boot under TCG for these modules. The price is a kernel
 * taint flag (E, "unsigned module") in the guest, which changes nothing else.
 */
function stripModuleSignature(ko: Buffer): Buffer {
  if (ko.length < SIG_MAGIC.length + 12 || !ko.subarray(ko.length - SIG_MAGIC.length).equals(SIG_MAGIC)) return ko;
  // struct module_signature (12 bytes) precedes the magic; its last field is the signature's length, big-endian.
  const info = ko.length - SIG_MAGIC.length - 12;
  const sigLen = ko.readUInt32BE(info + 8);
  if (sigLen > info) return ko;
  return ko.subarray(0, info - sigLen);
}

/**
 * mkfs.ext4 -d: the root filesystem tree becomes a filesystem image without mounting anything (no root
 * needed). Without a journal: a session's disk layer is only ever used together with the memory it was
 * captured with (a running machine's layer is discarded with it; a checkpoint saves both at one instant
 * with the VM stopped), so ext4 never has to recover from a crash, and every fsync in the guest skips a
 * journal commit (under TCG the identity step's fsyncs alone went from ~85 to ~40 ms).
 */
async function buildBaseDisk(rootfs: string, out: string, sizeMb: number, key: string): Promise<void> {
  await writeFile(out, '');
  await truncate(out, sizeMb * 1024 * 1024);
  const r = await runCommand('mkfs.ext4', ['-q', '-F', '-L', 'berth-root', '-O', '^has_journal', '-E', 'root_owner=0:0', '-d', rootfs, out]);
  if (r.code !== 0) {
    const hint = r.stderr.includes('ENOENT') || r.code === 127 ? ' (apt-get install -y e2fsprogs)' : '';
    throw new SandboxError(`mkfs.ext4 for the guest disk failed${hint}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`, { details: { key } });
  }
  const st = await stat(out);
  if (st.size !== sizeMb * 1024 * 1024) throw new SandboxError(`guest disk has size ${st.size}, expected ${sizeMb} MiB`);
  await chmod(out, 0o444);
}
