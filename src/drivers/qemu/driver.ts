import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type CallOptions,
  type CheckpointResult,
  type DriverCapabilities,
  type ImageVariant,
  type SandboxDriver,
  type SandboxSpec,
  type SandboxStats,
  abortError,
  InvalidArgumentError,
  InvalidStateError,
  NotFoundError,
  SandboxError,
  UnavailableError,
} from '../../core/index.js';
import { AgentChannel, MAX_PROCESSES, RING_BYTES } from '../agent/channel.js';
import { AgentBackedDriver } from '../agent/agent-driver.js';
import { commandInstalled } from '../command.js';
import { type GuestImage, type GuestRecipe, ensureGuestImage, withAgent } from '../image/guest.js';
import {
  QEMU_BINARY,
  QEMU_IMG,
  connectUnix,
  copyLayer,
  createLayer,
  defaultAgentPath,
  isOurQemu,
  logTail,
  moveFile,
  procStats,
  readPid,
  spawnDetached,
  waitGone,
} from './host.js';
import {
  DISK_FILE,
  ImageCommits,
  type ImageManifest,
  MANIFEST,
  MEMORY_FILE,
  MIGRATE_BANDWIDTH,
  cancelMigration,
  commitImage,
  completeImage,
  contAfterMigration,
  manifestText,
  migrate,
  writePending,
} from './checkpoint.js';
import { type MachineConfig, type MachinePaths, checkSocketPaths, machineConfig, machinePaths, qemuArgv, shellQuote } from './machine.js';
import { type Accel, probeAccel } from './probe.js';

export { defaultAgentPath } from './host.js';
import { QmpClient } from './qmp.js';
import { ConsoleRing } from './console.js';
import { syncClockSoon, withSignal } from './guest-clock.js';

export interface QemuDriverOptions {
  /** Per-sandbox state: <stateDir>/<sandboxId>/ holds its disk layer, sockets, pid file and logs. Required. */
  stateDir: string;
  /** Image cache (the guest image and the root filesystem it is made from). Required. */
  cacheDir: string;
  /** The static berth-agent binary. Default: dist/agent/berth-agent of this package. */
  agentPath?: string;
  /** 'auto' boots a test guest under KVM once per process and falls back to TCG (see probe.ts). Default 'auto'. */
  accel?: Accel | 'auto';
  /** Deadline for a booting guest's agent to answer, ms. Default 60000 (TCG on a loaded two-core host). */
  bootTimeoutMs?: number;
  /** Deadline for a restored guest's agent to answer, ms. Default 20000. */
  restoreTimeoutMs?: number;
  /** Guest image recipe. Default DEFAULT_GUEST_RECIPE. */
  recipe?: GuestRecipe;
  /**
   * Guest image recipe of the desktop variant (core/desktop.ts; DESKTOP_GUEST_RECIPE), built at the first desktop
   * create (a few minutes, once) and cached like the base image. Default: none (capabilities.images is ['base']).
   */
  desktopRecipe?: GuestRecipe;
  log?: (line: string) => void;
}

/** What a sandbox directory records about itself, for adopt() after a server restart. */
interface SandboxState {
  spec: SandboxSpec;
  config: MachineConfig;
}

interface Live {
  spec: SandboxSpec;
  config: MachineConfig;
  paths: MachinePaths;
  pid: number;
  qmp: QmpClient;
  agentSocket: Socket;
  /** The guest console's capped ring; absent for a machine started before consoles were rings. */
  console?: ConsoleRing;
  /** Absent while an adopted machine is paused: its agent cannot answer until resume(). */
  channel?: AgentChannel;
  /** Set while the driver itself stops the machine, so its end is not reported as a crash. */
  stopping: boolean;
  /** Set by close(): the machine keeps running, unobserved. */
  detached: boolean;
  shutdownReason?: string;
  exitInfo?: string;
  peakRss: number;
  /** A clock resync in flight (see guest-clock.ts); every agent call waits for it. */
  clockSync?: Promise<void>;
}

const STATE_FILE = 'sandbox.json';

/**
 * Smallest guest RAM for a desktop session, MiB: the guest kernel, Xvfb's framebuffer, openbox, x11vnc and
 * an application or two. Measured: at 256 MiB with Xvfb (1280x800) and a Tk application running, the guest
 * still had 148 MiB available (Xvfb 70 MiB resident, python3 21, x11vnc 14).
 */
export const DESKTOP_MIN_MEMORY_MB = 256;

/** What booting one image variant needs: its guest image, that image's initramfs with the agent, the accelerator. */
interface Ready {
  image: GuestImage;
  initrd: string;
  accel: Accel;
}

/**
 * SandboxDriver on QEMU: one detached QEMU process per sandbox incarnation (q35 machine, KVM when a boot
 * test passes, else TCG; see machine.ts and probe.ts), with the agent reached over a virtio-serial port
 * that QEMU exposes as a unix socket. QMP does pause (stop/cont) and checkpoints (migration to a file).
 *
 * Disk layers. Every sandbox writes to its own qcow2 file over the shared read-only base disk. A
 * checkpoint stops the VM and migrates its memory and device state; at that instant the migration has
 * flushed the layer and QEMU no longer writes it, so the layer is captured with the memory: moved into the
 * image (hibernate) or copied (leaveRunning, VM still stopped). A restore copies the image's layer again.
 * Layers therefore always sit directly on the base disk, never on each other: an image is self-contained
 * next to the base disk, the engine may delete any image while branches restored from it run, and chains
 * never grow with hibernate/wake cycles. The cost is a copy proportional to what the session wrote (the
 * qemu-img backing-chain alternative avoids the copy but ties every branch to its snapshot's file).
 */
export class QemuDriver extends AgentBackedDriver implements SandboxDriver {
  readonly name = 'qemu' as const;
  readonly capabilities: DriverCapabilities;

  private readonly live = new Map<string, Live>();
  private readonly exitListeners: Array<(id: string, reason: string) => void> = [];
  private readonly agentPath: string;
  private readonly bootTimeoutMs: number;
  private readonly restoreTimeoutMs: number;
  /** Per image variant, once it has been asked for (a failed one is dropped, so the next call retries). */
  private readonly readyP = new Map<ImageVariant, Promise<Ready>>();
  /** Images checkpointed but not yet durable (checkpoint.ts, ImageCommits). */
  private readonly commits: ImageCommits;

  constructor(private readonly opts: QemuDriverOptions) {
    super();
    if (!opts.stateDir || !opts.cacheDir) throw new InvalidArgumentError('QemuDriver needs stateDir and cacheDir');
    this.agentPath = opts.agentPath ?? defaultAgentPath();
    this.bootTimeoutMs = opts.bootTimeoutMs ?? 60_000;
    this.restoreTimeoutMs = opts.restoreTimeoutMs ?? 20_000;
    this.commits = new ImageCommits(opts.log);
    this.capabilities = Object.freeze({
      fork: true,
      liveMemory: true,
      snapshotWhileRunning: true,
      userland: 'full' as const,
      isolation: 'hypervisor' as const,
      images: opts.desktopRecipe ? (['base', 'desktop'] as const) : (['base'] as const),
      processRingBytes: RING_BYTES,
      maxProcesses: MAX_PROCESSES,
      // A guest kernel needs more room than gVisor's sentry (below 128 MiB Debian's kernel panics at boot), a
      // desktop more still (DESKTOP_MIN_MEMORY_MB, create() checks). Writes go to the guest's own disk.
      minMemoryMb: 128,
      writesInMemory: false,
    });
  }

  /** Checks the QEMU tools, builds the base guest image if needed and decides the accelerator (all cached). */
  async probe(opts: CallOptions = {}): Promise<void> {
    const tools = [[QEMU_BINARY, 'qemu-system-x86'], [QEMU_IMG, 'qemu-utils']] as const;
    const ran = await Promise.all(tools.map(([bin]) => commandInstalled(bin)));
    const missing = tools.find((_, i) => !ran[i]);
    if (missing) throw new UnavailableError(`${missing[0]} is not installed: run \`apt-get install -y ${missing[1]}\` as root`);
    await withSignal(this.ready(), opts.signal);
  }

  /** A variant's guest image, its initramfs with the agent, and the accelerator verdict: once per driver and variant. */
  private ready(variant: ImageVariant = 'base'): Promise<Ready> {
    let p = this.readyP.get(variant);
    if (!p) {
      const made = this.prepare(variant);
      made.catch(() => {
        if (this.readyP.get(variant) === made) this.readyP.delete(variant); // a failed build is retried by the next call
      });
      this.readyP.set(variant, made);
      p = made;
    }
    return p;
  }

  private async prepare(variant: ImageVariant): Promise<Ready> {
    if (!existsSync(this.agentPath)) throw new UnavailableError(`berth-agent is not built at ${this.agentPath}: run \`npm run build\``);
    const recipe = variant === 'desktop' ? this.opts.desktopRecipe : this.opts.recipe;
    if (variant === 'desktop' && !recipe) throw new UnavailableError('this QEMU backend was configured without the desktop image');
    const image = await ensureGuestImage({ cacheDir: this.opts.cacheDir, recipe, log: this.opts.log });
    const initrd = await withAgent(image, this.agentPath);
    // One accelerator for every variant, probed by booting the base image.
    if (variant !== 'base') return { image, initrd, accel: (await this.ready('base')).accel };
    const wanted = this.opts.accel ?? 'auto';
    const accel = wanted === 'auto' ? (await probeAccel({ image, initrd, log: this.opts.log })).accel : wanted;
    return { image, initrd, accel };
  }

  private dir(sandboxId: string): string {
    if (!/^[A-Za-z0-9_.-]+$/.test(sandboxId) || sandboxId.startsWith('.')) throw new InvalidArgumentError(`bad sandbox id ${JSON.stringify(sandboxId)}`);
    return join(this.opts.stateDir, sandboxId);
  }

  private get(sandboxId: string): Live {
    const l = this.live.get(sandboxId);
    if (!l) throw new NotFoundError('sandbox', sandboxId);
    return l;
  }

  private channel(sandboxId: string): AgentChannel {
    const l = this.get(sandboxId);
    if (!l.channel) throw new InvalidStateError(`sandbox ${sandboxId} is paused`);
    return l.channel;
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  async create(spec: SandboxSpec, opts: CallOptions = {}): Promise<void> {
    if (spec.image === 'desktop' && spec.limits.memoryMb < DESKTOP_MIN_MEMORY_MB) {
      throw new InvalidArgumentError(`memoryMb: a desktop session on the QEMU backend needs at least ${DESKTOP_MIN_MEMORY_MB} MiB, got ${spec.limits.memoryMb}`, {
        details: { field: 'memoryMb', min: DESKTOP_MIN_MEMORY_MB },
      });
    }
    const r = await withSignal(this.ready(spec.image), opts.signal);
    const config = machineConfig({
      accel: r.accel,
      memoryMb: spec.limits.memoryMb,
      cpus: spec.limits.cpus,
      image: { key: r.image.key, buildId: r.image.buildId, kernel: r.image.kernel, initrd: r.initrd, baseDisk: r.image.baseDisk, variant: spec.image },
    });
    const paths = await this.freshDir(spec.sandboxId);
    try {
      await createLayer(config.image.baseDisk, paths.disk, { diskMb: spec.limits.diskMb, signal: opts.signal });
      await this.launch(spec, config, paths, { timeoutMs: this.bootTimeoutMs, signal: opts.signal });
      await this.channel(spec.sandboxId).identity(spec.identity, randomBytes(64), opts);
    } catch (e) {
      await this.destroy(spec.sandboxId).catch(() => undefined);
      throw e;
    }
  }

  async restore(spec: SandboxSpec, imageDir: string, opts: CallOptions = {}): Promise<void> {
    // An image this process wrote is complete before its commit is durable; a restore need not wait.
    const manifest = this.commits.pending(imageDir) ?? (await completeImage(imageDir));
    const r = await withSignal(this.ready(), opts.signal);
    if (manifest.config.accel === 'kvm' && r.accel !== 'kvm') {
      throw new UnavailableError(`image ${imageDir} was taken under KVM, which is not usable here`);
    }
    const config: MachineConfig = { ...manifest.config, image: await withSignal(this.resolveImage(manifest), opts.signal) };
    if (spec.limits.memoryMb !== config.memoryMb || Math.ceil(spec.limits.cpus) !== config.cpus) {
      // A migrated machine keeps its RAM size and vCPU count; the image decides them.
      this.opts.log?.(`restore of ${spec.sandboxId}: limits ${JSON.stringify(spec.limits)} ignored, the image has ${config.memoryMb} MiB / ${config.cpus} vCPU`);
    }
    const paths = await this.freshDir(spec.sandboxId);
    try {
      await copyLayer(join(imageDir, manifest.diskFile), paths.disk, {
        baseDisk: config.image.baseDisk,
        recordedBase: manifest.config.image.baseDisk,
        signal: opts.signal,
      });
      await this.launch(spec, config, paths, { incoming: join(imageDir, manifest.memoryFile), timeoutMs: this.restoreTimeoutMs, signal: opts.signal });
      await this.channel(spec.sandboxId).identity(spec.identity, randomBytes(64), opts);
      syncClockSoon(this.opts.log, this.get(spec.sandboxId));
    } catch (e) {
      await this.destroy(spec.sandboxId).catch(() => undefined);
      throw e;
    }
  }

  /** An image this process wrote counts once its files are complete (as restore() takes it), before its commit is durable. */
  async imageComplete(imageDir: string): Promise<boolean> {
    return this.commits.pending(imageDir) !== undefined || (await completeImage(imageDir).then(() => true, () => false));
  }

  /**
   * The base disk and kernel a manifest's machine needs, of the image variant it records (the desktop
   * image's too). A layer only fits the base disk it was written over, so the build id must match: the
   * recorded image if it is still there, else the variant's current image when it is the same build at a
   * new path. The initramfs is only read at boot (a restored guest never looks at it again), so any build
   * of it will do when the recorded one is gone.
   */
  private async resolveImage(m: ImageManifest): Promise<MachineConfig['image']> {
    const want = m.config.image;
    const recorded = await readFile(join(dirname(want.baseDisk), 'meta.json'), 'utf8')
      .then((t) => (JSON.parse(t) as { buildId?: string }).buildId)
      .catch(() => undefined);
    const current = () => this.ready(want.variant ?? 'base');
    const initrd = existsSync(want.initrd) ? want.initrd : (await current()).initrd;
    if (recorded === want.buildId && existsSync(want.kernel)) return { ...want, initrd };
    const r = await current();
    if (r.image.buildId === want.buildId) return { ...want, kernel: r.image.kernel, baseDisk: r.image.baseDisk, initrd };
    throw new UnavailableError(`the guest image ${want.key} (build ${want.buildId}) this snapshot was taken on is no longer in the image cache`, {
      details: { key: want.key, buildId: want.buildId },
    });
  }

  private async freshDir(sandboxId: string): Promise<MachinePaths> {
    if (this.live.has(sandboxId)) throw new InvalidStateError(`sandbox ${sandboxId} already exists`);
    const dir = this.dir(sandboxId);
    const paths = machinePaths(dir);
    checkSocketPaths(paths);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return paths;
  }

  /**
   * Starts QEMU for spec, connects QMP and the agent's socket (before the guest opens its port, so the
   * agent never sees the host absent), loads the memory image when restoring, and handshakes the agent.
   */
  private async launch(
    spec: SandboxSpec,
    config: MachineConfig,
    paths: MachinePaths,
    o: { incoming?: string; timeoutMs: number; signal?: AbortSignal },
  ): Promise<void> {
    const signal = AbortSignal.any([AbortSignal.timeout(o.timeoutMs), ...(o.signal ? [o.signal] : [])]);
    await writeFile(join(paths.dir, STATE_FILE), JSON.stringify({ spec, config } satisfies SandboxState), { mode: 0o600 }); // the spec holds the secret env
    const proc = spawnDetached(qemuArgv(config, paths, { incoming: o.incoming !== undefined, name: spec.sandboxId }), join(paths.dir, 'qemu.log'));
    let exitInfo: string | undefined;
    void proc.exited.then((x) => (exitInfo = x.signal ? `killed by ${x.signal}` : `exit status ${x.code}`));
    const died = async () => new SandboxError(`QEMU for ${spec.sandboxId} ended (${exitInfo}): ${await logTail(join(paths.dir, 'qemu.log'))}`);
    let qmp: QmpClient | undefined;
    let sock: Socket | undefined;
    let ring: ConsoleRing | undefined;
    let entry: Live | undefined;
    try {
      qmp = await QmpClient.connect({
        path: paths.qmpSocket,
        timeoutMs: o.timeoutMs,
        signal,
        stillStarting: () => {
          if (exitInfo) throw new SandboxError(`QEMU ended (${exitInfo}) before it answered QMP`);
        },
      }).catch(async (e: unknown) => {
        throw exitInfo ? await died() : e;
      });
      await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'events', state: true }] });
      await qmp.execute('migrate-set-parameters', { 'max-bandwidth': MIGRATE_BANDWIDTH });
      sock = await connectUnix(paths.agentSocket, signal);
      ring = await ConsoleRing.attach(paths.consoleSocket, paths.serialLog, signal);
      entry = { spec, config, paths, pid: proc.pid, qmp, agentSocket: sock, console: ring, stopping: false, detached: false, peakRss: 0 };
      this.watch(entry, proc.exited);
      this.live.set(spec.sandboxId, entry);
      if (o.incoming !== undefined) {
        await migrate(qmp, 'migrate-incoming', `exec:cat ${shellQuote(o.incoming)}`, signal);
        await contAfterMigration(qmp, signal);
      }
      entry.channel = await AgentChannel.connect({ input: sock, output: sock, signal, timeoutMs: o.timeoutMs, helloIntervalMs: 100, acceptTcp: this.tcp.acceptorFor(spec.sandboxId) }).catch(
        async (e: unknown) => {
          throw exitInfo ? await died() : new SandboxError(`the agent in ${spec.sandboxId} did not answer: ${(e as Error).message}`, { cause: e });
        },
      );
    } catch (e) {
      // A start that failed is not a machine that died: the caller destroys what is left.
      if (entry) entry.stopping = true;
      qmp?.close();
      sock?.destroy();
      await ring?.close();
      throw signal.aborted && !(e instanceof SandboxError) ? abortError(signal) : e;
    }
  }

  /** Reports a QEMU that ends without the driver asking (guest poweroff or panic, OOM kill, crash). */
  private watch(entry: Live, exited?: Promise<{ code: number | null; signal: string | null }>): void {
    const id = entry.spec.sandboxId;
    entry.qmp.onEvent((e) => {
      if (e.event === 'SHUTDOWN') entry.shutdownReason = String(e.data?.reason ?? 'shutdown');
    });
    void exited?.then((x) => (entry.exitInfo = x.signal ? `killed by ${x.signal}` : `exit status ${x.code}`));
    entry.qmp.onClose(() => {
      if (this.live.get(id) !== entry || entry.stopping || entry.detached) return;
      this.live.delete(id);
      entry.channel?.close();
      entry.agentSocket.destroy();
      void (async () => {
        await waitGone(entry.pid, entry.paths.qmpSocket, 2000);
        await sleep(20); // the child's exit status arrives just after its QMP socket closes
        await entry.console?.close();
        const serial = entry.console ? entry.console.tail(3) : await logTail(entry.paths.serialLog, 3);
        const reason = [`qemu ${entry.exitInfo ?? 'exited'}`, entry.shutdownReason && `(${entry.shutdownReason})`, serial && `console: ${serial}`]
          .filter(Boolean)
          .join(' ');
        for (const l of this.exitListeners) l(id, reason);
      })();
    });
  }

  async adopt(spec: SandboxSpec, opts: CallOptions = {}): Promise<boolean> {
    if (this.live.has(spec.sandboxId)) return true;
    const dir = this.dir(spec.sandboxId);
    const state = await readFile(join(dir, STATE_FILE), 'utf8')
      .then((t) => JSON.parse(t) as SandboxState)
      .catch(() => undefined);
    if (!state) return false;
    const paths = machinePaths(dir);
    const pid = await readPid(paths.pidFile);
    if (!pid || !(await isOurQemu(pid, paths.qmpSocket))) return false;
    let qmp: QmpClient | undefined;
    let sock: Socket | undefined;
    let ring: ConsoleRing | undefined;
    try {
      const signal = AbortSignal.any([AbortSignal.timeout(15_000), ...(opts.signal ? [opts.signal] : [])]);
      qmp = await QmpClient.connect({ path: paths.qmpSocket, timeoutMs: 5000, signal });
      await cancelMigration(qmp, signal); // first: QEMU refuses migration settings while one runs
      await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'events', state: true }] });
      await qmp.execute('migrate-set-parameters', { 'max-bandwidth': MIGRATE_BANDWIDTH });
      const status = await qmp.execute<{ running: boolean }>('query-status');
      sock = await connectUnix(paths.agentSocket, signal);
      // A machine started by a server from before consoles were rings writes its console to serial.log itself.
      ring = existsSync(paths.consoleSocket) ? await ConsoleRing.attach(paths.consoleSocket, paths.serialLog, signal) : undefined;
      const entry: Live = {
        spec: { ...state.spec, ...spec },
        config: state.config,
        paths,
        pid,
        qmp,
        agentSocket: sock,
        console: ring,
        stopping: false,
        detached: false,
        peakRss: 0,
      };
      // A machine paused when the server died stays paused (the engine decides); its agent is attached on resume.
      if (status.running) {
        entry.channel = await AgentChannel.connect({ input: sock, output: sock, signal, timeoutMs: 10_000, helloIntervalMs: 100, acceptTcp: this.tcp.acceptorFor(spec.sandboxId) });
      }
      this.watch(entry);
      this.live.set(spec.sandboxId, entry);
      return true;
    } catch (e) {
      this.opts.log?.(`adopt of ${spec.sandboxId} failed: ${(e as Error).message}`);
      qmp?.close();
      sock?.destroy();
      await ring?.close();
      return false;
    }
  }

  async list(): Promise<string[]> {
    const entries = await readdir(this.opts.stateDir, { withFileTypes: true }).catch(() => []);
    const ids = new Set(entries.filter((e) => e.isDirectory() && !e.name.startsWith('.')).map((e) => e.name));
    for (const id of this.live.keys()) ids.add(id);
    return [...ids];
  }

  async pause(sandboxId: string, opts: CallOptions = {}): Promise<void> {
    await this.get(sandboxId).qmp.execute('stop', undefined, opts);
  }

  async resume(sandboxId: string, opts: CallOptions = {}): Promise<void> {
    const live = this.get(sandboxId);
    await contAfterMigration(live.qmp, opts.signal); // recovery resumes machines a hibernate or wake stopped
    if (!live.channel) {
      live.channel = await AgentChannel.connect({ input: live.agentSocket, output: live.agentSocket, signal: opts.signal, timeoutMs: 10_000, helloIntervalMs: 100, acceptTcp: this.tcp.acceptorFor(live.spec.sandboxId) });
    }
    syncClockSoon(this.opts.log, live);
  }

  async checkpoint(sandboxId: string, imageDir: string, opts: CallOptions & { leaveRunning?: boolean } = {}): Promise<CheckpointResult> {
    const live = this.get(sandboxId);
    const { running } = await live.qmp.execute<{ running: boolean }>('query-status', undefined, opts);
    await mkdir(imageDir, { recursive: true });
    // A clock resync still running would be saved with the image and could set a stale time after a restore.
    if (running && live.clockSync) await live.clockSync;
    // Nothing half-written on the agent channel at the instant memory is saved (PROTOCOL.md, Quiesce).
    if (running && live.channel) await live.channel.quiesce(opts);
    if (running) await live.qmp.execute('stop');
    const memory = join(imageDir, MEMORY_FILE);
    const disk = join(imageDir, DISK_FILE);
    const manifest: ImageManifest = {
      version: 1,
      backend: 'qemu',
      config: live.config,
      memoryFile: MEMORY_FILE,
      diskFile: DISK_FILE,
      sandboxId,
      identity: live.spec.identity,
      createdAt: new Date().toISOString(),
    };
    const text = manifestText(manifest);
    const carryOn = async () => {
      if (!running) return;
      await contAfterMigration(live.qmp);
      syncClockSoon(this.opts.log, live); // its command is also the line that ends the agent's quiescence
    };
    try {
      await rm(join(imageDir, MANIFEST), { force: true });
      await migrate(live.qmp, 'migrate', `exec:cat > ${shellQuote(memory)}`, opts.signal);
    } catch (e) {
      await rm(memory, { force: true });
      await carryOn().catch(() => undefined);
      throw e;
    }
    // The migration has flushed the disk layer and QEMU writes it no more until `cont` (or ever): it is
    // the disk as it stood at the instant the memory was saved.
    if (opts.leaveRunning) {
      try {
        await copyFile(live.paths.disk, disk);
      } finally {
        await carryOn();
      }
    } else {
      await writePending(imageDir, text, live.paths.disk); // the memory is whole (PENDING)
      live.stopping = true;
      await live.qmp.execute('quit').catch(() => undefined);
      if (!(await waitGone(live.pid, live.paths.qmpSocket, 10_000))) process.kill(live.pid, 'SIGKILL');
      this.live.delete(sandboxId);
      live.channel?.close();
      live.agentSocket.destroy();
      live.qmp.close();
      await live.console?.close();
      await moveFile(live.paths.disk, disk);
      await rm(live.paths.dir, { recursive: true, force: true });
    }
    this.commits.add(imageDir, manifest, () => commitImage(imageDir, text));
    const sizes = await Promise.all([stat(memory), stat(disk)]);
    return { bytes: sizes[0].size + sizes[1].size + Buffer.byteLength(text) };
  }

  async stats(sandboxId: string): Promise<SandboxStats> {
    const live = this.get(sandboxId);
    const s = await procStats(live.pid).catch((e: unknown) => {
      throw new SandboxError(`stats of ${sandboxId}: QEMU process ${live.pid} is gone`, { cause: e });
    });
    live.peakRss = Math.max(live.peakRss, s.rssBytes, s.hwmBytes);
    return { cpuSeconds: s.cpuSeconds, memoryBytes: s.rssBytes, peakMemoryBytes: live.peakRss };
  }

  async destroy(sandboxId: string): Promise<void> {
    const dir = this.dir(sandboxId);
    this.tcp.forget(sandboxId);
    const live = this.live.get(sandboxId);
    if (live) {
      live.stopping = true;
      this.live.delete(sandboxId);
      live.channel?.close();
      live.agentSocket.destroy();
      live.qmp.close();
      await live.console?.close();
    }
    const paths = machinePaths(dir);
    const pid = live?.pid ?? (await readPid(paths.pidFile));
    if (pid && (await isOurQemu(pid, paths.qmpSocket))) {
      // The disk layer is deleted with the rest, so there is nothing to shut down cleanly.
      process.kill(pid, 'SIGKILL');
      if (!(await waitGone(pid, paths.qmpSocket, 10_000))) throw new SandboxError(`QEMU ${pid} of ${sandboxId} did not die`);
    }
    await rm(dir, { recursive: true, force: true });
  }

  onExit(listener: (sandboxId: string, reason: string) => void): void {
    this.exitListeners.push(listener);
  }

  async close(): Promise<void> {
    await this.commits.settled();
    for (const live of this.live.values()) {
      live.detached = true;
      live.channel?.close();
      live.agentSocket.destroy();
      live.qmp.close();
      await live.console?.close();
    }
    this.live.clear();
  }

  // ---- commands and files: AgentBackedDriver, over this channel ----------------------------------

  /** After any clock resync, so a caller's command or file operation sees the right time. */
  protected override async agentChannel(sandboxId: string): Promise<AgentChannel> {
    const l = this.get(sandboxId);
    if (l.clockSync) await l.clockSync;
    return this.channel(sandboxId);
  }

  /** The agent is started by the guest's init, not with the spec: the sandbox's environment goes with each command. */
  protected override commandEnv(sandboxId: string): Record<string, string> {
    return this.get(sandboxId).spec.env;
  }
}
