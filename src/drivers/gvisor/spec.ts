import type { SandboxSpec } from '../../core/index.js';
import { cgroupPath } from './cgroup.js';

/** Where the agent binary appears inside every sandbox (a read-only bind mount of the host's build). */
export const AGENT_DIR_IN_SANDBOX = '/opt/berth/bin';

// Docker's default set plus SYS_ADMIN, which sethostname needs when a fork branch takes its new
// identity. These are capabilities inside gVisor's user-space kernel, not on the host.
const CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL',
  'CAP_AUDIT_WRITE', 'CAP_SYS_ADMIN',
];

const CPU_PERIOD_US = 100_000;

/** The OCI runtime spec (config.json) for one sandbox. */
/** What a sandbox is made of on the host; `rootfsImage`, when set, is the root read from an EROFS image. */
export interface SandboxPaths {
  rootfs: string;
  agentDir: string;
  rootfsImage?: string;
}

export function ociSpec(spec: SandboxSpec, paths: SandboxPaths): object {
  const env = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: '/root',
    LANG: 'C.UTF-8',
    ...spec.env,
  };
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      // With a disk limit the agent, as PID 1, first moves the root onto an overlay of that size (agent/c/disk.c).
      args: [`${AGENT_DIR_IN_SANDBOX}/berth-agent`, ...(spec.limits.diskMb ? ['--disk-mb', String(spec.limits.diskMb)] : [])],
      env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      cwd: '/root',
      capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS, inheritable: CAPS },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1048576, soft: 1048576 }],
      noNewPrivileges: false,
    },
    root: { path: paths.rootfs, readonly: false },
    // runsc's rootfs annotations: the sentry reads the EROFS image itself, with the same in-memory upper layer.
    ...(paths.rootfsImage
      ? { annotations: { 'dev.gvisor.spec.rootfs.source': paths.rootfsImage, 'dev.gvisor.spec.rootfs.type': 'erofs', 'dev.gvisor.spec.rootfs.overlay': 'memory' } }
      : {}),
    hostname: spec.identity.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      // Without a disk limit /tmp is a tmpfs of its own; with one it is a directory of the limited overlay.
      ...(spec.limits.diskMb ? [] : [{ destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] }]),
      { destination: AGENT_DIR_IN_SANDBOX, type: 'bind', source: paths.agentDir, options: ['rbind', 'ro'] },
    ],
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network' }],
      cgroupsPath: cgroupPath(spec.sandboxId),
      resources: {
        memory: { limit: spec.limits.memoryMb * 1024 * 1024 },
        cpu: { quota: Math.round(spec.limits.cpus * CPU_PERIOD_US), period: CPU_PERIOD_US },
        pids: { limit: 4096 },
      },
    },
  };
}
