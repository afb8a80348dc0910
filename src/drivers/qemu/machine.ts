import { join } from 'node:path';
import { ConfigError, type ImageVariant } from '../../core/index.js';
import { GUEST_AGENT_PORT } from '../image/guest.js';

/**
 * The virtual machine every session runs in, as data (MachineConfig) and as QEMU's command line
 * (qemuArgv). A checkpoint stores the MachineConfig it was taken with, and a restore builds its command
 * line from that stored config, because QEMU only accepts an incoming migration into the same devices.
 *
 * Machine type: q35, not microvm. Both boot Debian kernels under TCG in about 2 s, but a fork branch must
 * reseed the guest kernel's random pool the moment it runs, and only QEMU's vmgenid device does that from
 * the hypervisor side (Linux's vmgenid driver calls add_vmfork_randomness() when the generation id
 * changes, which every restore does). QEMU builds the vmgenid ACPI tables for pc/q35 only; on microvm the
 * device exists but the guest never sees it. Debian's cloud kernel lacks CONFIG_VMGENID, so the image
 * uses the generic kernel (drivers/image/guest.ts), booted as an ELF through PVH to skip its xz
 * decompression (about 4 s of emulated CPU).
 *
 * The guest gets no network device (-nic none), a virtio disk (its qcow2 layer), a virtio-serial port for
 * the agent, virtio-rng for boot entropy, and vmgenid.
 */
export interface MachineConfig {
  version: 1;
  machine: 'q35';
  accel: 'kvm' | 'tcg';
  /** QEMU -cpu model: host under KVM; under TCG qemu64 (measured faster to boot than max). */
  cpu: string;
  /** Guest RAM, MiB. */
  memoryMb: number;
  /** vCPUs (the session's fractional cpu limit rounded up). */
  cpus: number;
  kernelCmdline: string;
  image: {
    key: string;
    buildId: string;
    kernel: string;
    initrd: string;
    baseDisk: string;
    /** Which image variant the guest image is, for finding it again at a restore. Absent: 'base' (machines from before desktops). */
    variant?: ImageVariant;
  };
}

/** Per-process paths, all inside the sandbox's own directory. */
export interface MachinePaths {
  dir: string;
  disk: string;
  qmpSocket: string;
  agentSocket: string;
  /** QEMU serves the guest's serial console here; the driver keeps it as a capped ring (console.ts). */
  consoleSocket: string;
  /** The console ring's copy on disk, at most CONSOLE_RING_BYTES. */
  serialLog: string;
  pidFile: string;
}

export function machinePaths(dir: string): MachinePaths {
  return {
    dir,
    disk: join(dir, 'disk.qcow2'),
    qmpSocket: join(dir, 'qmp.sock'),
    agentSocket: join(dir, 'agent.sock'),
    consoleSocket: join(dir, 'console.sock'),
    serialLog: join(dir, 'serial.log'),
    pidFile: join(dir, 'qemu.pid'),
  };
}

/** The longest unix socket path the kernel takes (sun_path is 108 bytes with its NUL). */
const SUN_PATH_MAX = 107;

/**
 * Smallest guest RAM accepted, MiB. Measured: 80 MiB panics while unpacking the initramfs, 96 MiB just
 * reaches the agent; 128 leaves room for a command or two (the engine's own minimum is lower).
 */
export const MIN_MEMORY_MB = 128;

/**
 * Kernel command line. Each item trims emulated boot time or keeps TCG's timing from confusing the guest:
 * quiet (serial output is slow under emulation), tsc=reliable and no_timer_check (TCG's TSC jitters
 * and would otherwise be declared unstable), 8250.nr_uarts=1 and pci=lastbus=0 (no probing of absent
 * hardware), cryptomgr.notests, audit=0, lsm= (no LSM: the sandbox boundary is the hypervisor, not the
 * guest kernel), mitigations=off and nokaslr (they protect guest processes from one another, which all
 * belong to one session), panic=-1 with -no-reboot (a guest panic ends QEMU, which the driver reports).
 */
export const KERNEL_CMDLINE = [
  'console=ttyS0',
  'quiet',
  'panic=-1',
  'tsc=reliable',
  'no_timer_check',
  '8250.nr_uarts=1',
  'pci=lastbus=0',
  'cryptomgr.notests',
  'audit=0',
  'lsm=',
  'mitigations=off',
  'nokaslr',
  'rcupdate.rcu_expedited=1',
].join(' ');

export function machineConfig(opts: {
  accel: 'kvm' | 'tcg';
  memoryMb: number;
  cpus: number;
  image: MachineConfig['image'];
}): MachineConfig {
  if (!Number.isInteger(opts.memoryMb) || opts.memoryMb < MIN_MEMORY_MB) {
    throw new ConfigError(`memoryMb ${opts.memoryMb} is below the QEMU backend's minimum of ${MIN_MEMORY_MB} MiB`, {
      details: { memoryMb: opts.memoryMb, min: MIN_MEMORY_MB },
    });
  }
  if (!(opts.cpus > 0)) throw new ConfigError(`cpus must be positive, got ${opts.cpus}`);
  return {
    version: 1,
    machine: 'q35',
    accel: opts.accel,
    cpu: opts.accel === 'kvm' ? 'host' : 'qemu64',
    memoryMb: opts.memoryMb,
    cpus: Math.ceil(opts.cpus),
    kernelCmdline: KERNEL_CMDLINE,
    image: opts.image,
  };
}

/** Throws ConfigError when a socket path of this directory would not fit in sun_path. */
export function checkSocketPaths(paths: MachinePaths): void {
  for (const p of [paths.qmpSocket, paths.agentSocket, paths.consoleSocket]) {
    if (Buffer.byteLength(p) > SUN_PATH_MAX) {
      throw new ConfigError(`unix socket path ${p} is longer than ${SUN_PATH_MAX} bytes: use a shorter state directory`);
    }
  }
}

/**
 * QEMU's argv (without the binary) for `cfg`. With `incoming`, QEMU waits for a migration stream
 * (`-incoming defer`; the driver then issues migrate-incoming) instead of booting.
 */
export function qemuArgv(cfg: MachineConfig, paths: MachinePaths, opts: { incoming?: boolean; name?: string } = {}): string[] {
  const accel = cfg.accel === 'kvm' ? ['-accel', 'kvm'] : ['-accel', 'tcg,thread=multi'];
  const args = [
    '-name', `berth:${opts.name ?? 'guest'}`,
    // Legacy and unused q35 devices off: each costs boot time and none is reachable from the guest's agent.
    '-machine', 'q35,sata=off,smbus=off,usb=off,vmport=off,smm=off,hpet=off,i8042=off,graphics=off,dump-guest-core=off',
    ...accel,
    '-cpu', cfg.cpu,
    '-m', String(cfg.memoryMb),
    '-smp', String(cfg.cpus),
    '-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot',
    '-nic', 'none',
    // seccomp: no obsolete or privilege-raising syscalls; spawning stays allowed for exec: migration.
    '-sandbox', 'on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny',
    '-kernel', cfg.image.kernel,
    '-initrd', cfg.image.initrd,
    '-append', cfg.kernelCmdline,
    // A socket, not a file: a guest writing to its console must not be able to fill the host's disk.
    '-chardev', `socket,id=con,path=${opt(paths.consoleSocket)},server=on,wait=off`,
    '-serial', 'chardev:con',
    '-chardev', `socket,id=qmp,path=${opt(paths.qmpSocket)},server=on,wait=off`,
    '-mon', 'chardev=qmp,mode=control',
    // cache=unsafe: the guest's flushes stop at QEMU. A running machine's disk layer is never reused
    // after a host crash (its memory is gone with it; recovery restores the last checkpoint, whose layer
    // the driver fsyncs itself), so forwarding every guest fsync to the host disk would buy nothing and
    // costs ~80 ms per fsync-heavy agent command under TCG (e.g. the identity step's machine-id write).
    '-drive', `if=none,id=disk0,file=${opt(paths.disk)},format=qcow2,cache=unsafe,discard=unmap,aio=threads`,
    '-device', 'virtio-blk-pci,drive=disk0',
    '-chardev', `socket,id=agent,path=${opt(paths.agentSocket)},server=on,wait=off`,
    '-device', 'virtio-serial-pci,id=vser0',
    '-device', `virtserialport,bus=vser0.0,chardev=agent,name=${GUEST_AGENT_PORT}`,
    '-device', 'virtio-rng-pci',
    // guid=auto: a new generation id in every QEMU process, so every restore is a "VM fork" to the guest.
    '-device', 'vmgenid,guid=auto',
    '-pidfile', paths.pidFile,
  ];
  if (opts.incoming) args.push('-incoming', 'defer');
  return args;
}

/** Escapes a value inside a QEMU option string, where a comma separates options and ",," is a literal comma. */
function opt(s: string): string {
  return s.replace(/,/g, ',,');
}

/** Quotes a path for the shell QEMU runs an exec: migration URI with. */
export function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
