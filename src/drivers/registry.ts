/**
 * The production backends: how to build each one's driver. The names are core's BACKENDS, and the Record
 * below makes the compiler hold this table to them, so adding a backend is its folder here, its name in
 * BACKENDS and its line in DRIVERS. The in-memory driver (drivers/memory) is a test double and is not here.
 */
import { ConfigError, isBackendName, BACKENDS, type BackendName, type SandboxDriver } from '../core/index.js';
import { GvisorDriver } from './gvisor/driver.js';
import { DESKTOP_GUEST_RECIPE } from './image/guest.js';
import { DESKTOP_ROOTFS_RECIPE, ensureRootfs, rootfsImagePath } from './image/rootfs.js';
import { QemuDriver } from './qemu/driver.js';

/** What every backend is built from. */
export interface DriverContext {
  /** The backend's own state directory (the composition root gives `<dataDir>/<name>`). */
  stateDir: string;
  /** Image cache shared by the backends (root filesystem, guest image). */
  cacheDir: string;
  /** Host path of the static berth-agent binary. */
  agentPath: string;
  log: (line: string) => void;
  /** Every output line of an image build as it comes, for a progress display. Default: none. */
  progress?: (line: string) => void;
}

export interface BackendEntry {
  /** What the server shows (/healthz, the terminal) while the backend gets ready. */
  readonly preparing: string;
  /** Builds the driver, and any image it needs first; the caller probes it. */
  create(ctx: DriverContext): Promise<SandboxDriver>;
}

export const DRIVERS: Readonly<Record<BackendName, BackendEntry>> = Object.freeze({
  gvisor: {
    preparing: 'preparing the gVisor backend (the first start builds the base image, about a minute)',
    async create(ctx: DriverContext): Promise<SandboxDriver> {
      const rootfs = await ensureRootfs({ cacheDir: ctx.cacheDir, log: (l) => (ctx.log(l), ctx.progress?.(l)), progress: ctx.progress });
      // The desktop variant is built the first time a desktop session is created (a few minutes, once).
      const desktopImage = async () => {
        const dir = await ensureRootfs({ cacheDir: ctx.cacheDir, recipe: DESKTOP_ROOTFS_RECIPE, log: ctx.log });
        return { rootfs: dir, rootfsImage: rootfsImagePath(dir) };
      };
      return new GvisorDriver({ stateDir: ctx.stateDir, rootfs, rootfsImage: rootfsImagePath(rootfs), desktopImage, agentPath: ctx.agentPath, log: ctx.log });
    },
  },
  qemu: {
    preparing: 'preparing the QEMU backend',
    async create(ctx: DriverContext): Promise<SandboxDriver> {
      // The desktop guest image is built the first time a desktop session is created (a few minutes, once).
      return new QemuDriver({ stateDir: ctx.stateDir, cacheDir: ctx.cacheDir, agentPath: ctx.agentPath, desktopRecipe: DESKTOP_GUEST_RECIPE, log: ctx.log });
    },
  },
});

/** Checks a configured list of backend names: each known, none twice. ConfigError (field `backends`) otherwise. */
export function backendList(names: readonly string[]): BackendName[] {
  const out: BackendName[] = [];
  for (const n of names) {
    if (!isBackendName(n)) {
      throw new ConfigError(`backends: unknown backend ${JSON.stringify(n)} (known: ${BACKENDS.join(', ')})`, { details: { field: 'backends', value: n } });
    }
    if (out.includes(n)) throw new ConfigError(`backends: ${n} is listed twice`, { details: { field: 'backends', value: n } });
    out.push(n);
  }
  return out;
}
