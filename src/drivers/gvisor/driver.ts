import { randomBytes } from 'node:crypto';
import { constants as fsc, existsSync, openSync, closeSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { dirname, join } from 'node:path';
import {
  type CallOptions,
  type CheckpointResult,
  type DriverCapabilities,
  type SandboxDriver,
  type SandboxSpec,
  type SandboxStats,
  NotFoundError,
  SandboxError,
  UnavailableError,
  InvalidStateError,
  NoSpaceError,
} from '../../core/index.js';
import { AgentChannel, MAX_PROCESSES, RING_BYTES } from '../agent/channel.js';
import { AgentBackedDriver } from '../agent/agent-driver.js';
import { commandInstalled } from '../command.js';
import { cgroupPids, freeze, freezerState, oomKilled, readStats, removeCgroups, setSandboxesShares, thaw } from './cgroup.js';
import { growPipes, makeFifos, pidsOf, runscProcesses, type RunscProcess } from './host.js';
import { ensureRoom, pausedDeath, runningFromStateFile } from './host-checks.js';
import { Runsc } from './runsc.js';
import { ociSpec, type SandboxPaths } from './spec.js';

export interface GvisorDriverOptions {
  /** Directory for runsc state, bundles and agent FIFOs. Required. */
  stateDir: string;
  /** The base root filesystem (see drivers/image/rootfs.ts). Required. */
  rootfs: string;
  /**
   * The base root filesystem as an EROFS image (drivers/image/rootfs.ts, rootfsImagePath), read by gVisor's
   * own kernel. Default: none, the directory is read through the gofer (where runsc 0.0~20240729 fails
   * lgetxattr on symlinks, so `ls -l` of one prints "Bad file descriptor").
   */
  rootfsImage?: string;
  /**
   * The desktop image variant (core/desktop.ts), built on first use: resolves to its root filesystem and
   * EROFS image. Default: none, and the driver cannot boot desktops (capabilities.images is ['base']).
   */
  desktopImage?: () => Promise<{ rootfs: string; rootfsImage: string }>;
  /** Host path of the static berth-agent binary. Required. */
  agentPath: string;
  /** runsc binary. Default 'runsc'. */
  runscPath?: string;
  /** gVisor platform. Default 'ptrace' (kvm hangs on some hosts). */
  platform?: string;
  /** Deadline for the agent to answer after start or restore, ms. Default 15000. */
  agentTimeoutMs?: number;
  log?: (line: string) => void;
}

interface Live {
  channel: AgentChannel;
  /** The host ends of the FIFOs. close() destroys them: left open, a driver created later in the same
   * process (a restart in tests or an embedding) would share the FIFOs with them and lose agent output. */
  streams: Array<{ destroy(): void }>;
  /** True while the driver itself is stopping the sandbox, so its exit is not reported as a crash. */
  stopping: boolean;
  /** Frozen by pause(): its agent cannot answer, so the paused watch checks on it from the host. */
  paused: boolean;
}

/**
 * Extra flags of `runsc checkpoint` and `runsc restore` (runsc ≥ 0.0~20240729), each kept only where
 * `npm run bench -- --only checkpoint` shows it faster than runsc's default (README, Benchmarks).
 */
export const CHECKPOINT_FLAGS: readonly string[] = Object.freeze([]);
export const RESTORE_FLAGS: readonly string[] = Object.freeze([]);

/**
 * A checkpoint in progress: where its image goes, what the restore after it needs, and whether the sandbox
 * is to run on (a snapshot) or stop there (a hibernate).
 */
interface CheckpointMarker {
  imageDir: string;
  paths: SandboxPaths;
  kind: 'snapshot' | 'hibernate';
}

async function readMarker(file: string): Promise<CheckpointMarker | undefined> {
  try {
    return { kind: 'snapshot', ...(JSON.parse(await readFile(file, 'utf8')) as Partial<CheckpointMarker>) } as CheckpointMarker;
  } catch {
    return undefined;
  }
}

/** Created in the image directory once `runsc checkpoint` has exited 0 (RunscCli.run's doneFile). */
const CHECKPOINT_DONE = 'checkpoint.done';

/** Written beside a checkpoint image, last: what a restore must reproduce exactly. */
const MANIFEST = 'berth-image.json';
interface ImageManifest extends SandboxPaths {
  version: 1;
  backend: 'gvisor';
}

/**
 * SandboxDriver on gVisor. One runsc sandbox per session incarnation; the agent (PID 1 inside) is
 * reached over two host FIFOs donated as its stdin/stdout, so a command costs one fork+exec inside the
 * sandbox instead of a `runsc exec`. Pause freezes the sandbox's cgroup directly.
 */
export class GvisorDriver extends AgentBackedDriver implements SandboxDriver {
  readonly name = 'gvisor' as const;
  readonly capabilities: DriverCapabilities;

  private readonly runsc: Runsc;
  private readonly live = new Map<string, Live>();
  private readonly exitListeners: Array<(id: string, reason: string, last?: SandboxStats) => void> = [];
  private readonly agentTimeoutMs: number;
  /** Removals of checkpointed sandboxes still running in the background, by sandbox id. */
  private readonly cleanups = new Map<string, Promise<void>>();
  private pausedWatch: NodeJS.Timeout | undefined;
  /** The sandboxes' CPU weight against the server's, set at construction (cgroup.ts, SANDBOXES_CPU_SHARES). */
  private readonly shares: Promise<void>;

  constructor(private readonly opts: GvisorDriverOptions) {
    super();
    this.runsc = new Runsc({
      binary: opts.runscPath ?? 'runsc',
      root: join(opts.stateDir, 'runsc'),
      platform: opts.platform ?? 'ptrace',
    });
    this.agentTimeoutMs = opts.agentTimeoutMs ?? 15_000;
    // Best effort: without a cpu controller (or not root) sandboxes simply weigh what every process does.
    this.shares = existsSync('/sys/fs/cgroup/cpu')
      ? setSandboxesShares().catch((e: unknown) => this.opts.log?.(`cannot set the sandboxes' CPU shares: ${(e as Error).message}`))
      : Promise.resolve();
    this.capabilities = Object.freeze({
      fork: true,
      liveMemory: true,
      snapshotWhileRunning: true,
      userland: 'full' as const,
      isolation: 'user-space-kernel' as const,
      processRingBytes: RING_BYTES,
      maxProcesses: MAX_PROCESSES,
      minMemoryMb: 64,
      writesInMemory: true,
      images: opts.desktopImage ? (['base', 'desktop'] as const) : (['base'] as const),
    });
  }

  async probe(): Promise<void> {
    if (!(await commandInstalled(this.opts.runscPath ?? 'runsc'))) {
      throw new UnavailableError('runsc (gVisor) is not installed: run `apt-get install -y runsc` as root');
    }
    if (!existsSync('/sys/fs/cgroup/freezer')) throw new UnavailableError('the cgroup v1 freezer controller is not mounted');
    if (!existsSync(this.opts.agentPath)) throw new UnavailableError(`berth-agent is not built at ${this.opts.agentPath}: run \`npm run build\``);
    if (!existsSync(join(this.opts.rootfs, '.berth-complete'))) throw new UnavailableError(`base image missing at ${this.opts.rootfs}`);
    if (this.opts.rootfsImage && !existsSync(this.opts.rootfsImage)) throw new UnavailableError(`base image missing at ${this.opts.rootfsImage}`);
  }

  private dir(sandboxId: string): string {
    if (!/^[A-Za-z0-9_.-]+$/.test(sandboxId)) throw new SandboxError(`bad sandbox id ${sandboxId}`);
    return join(this.opts.stateDir, 'sandboxes', sandboxId);
  }

  private channel(sandboxId: string): AgentChannel {
    const l = this.live.get(sandboxId);
    if (!l) throw new NotFoundError('sandbox', sandboxId, { retryable: true });
    return l.channel;
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  async create(spec: SandboxSpec, opts: CallOptions = {}): Promise<void> {
    const paths: SandboxPaths = { rootfs: this.opts.rootfs, agentDir: dirname(this.opts.agentPath) };
    if (this.opts.rootfsImage) paths.rootfsImage = this.opts.rootfsImage;
    if (spec.image === 'desktop') {
      if (!this.opts.desktopImage) throw new UnavailableError('this gVisor backend was configured without the desktop image');
      Object.assign(paths, await this.opts.desktopImage());
    }
    await this.start(spec, paths, ['run', '--detach'], opts);
  }

  async restore(spec: SandboxSpec, imageDir: string, opts: CallOptions = {}): Promise<void> {
    const manifest = await readManifest(imageDir);
    const { version: _v, backend: _b, ...paths } = manifest;
    await this.start(spec, paths, ['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${imageDir}`], opts);
  }

  async imageComplete(imageDir: string): Promise<boolean> {
    return readManifest(imageDir).then(() => true, () => false);
  }

  /** Shared by create and restore: bundle, FIFOs, `runsc run|restore`, agent handshake, identity. */
  private async start(spec: SandboxSpec, paths: SandboxPaths, verb: string[], opts: CallOptions): Promise<void> {
    await this.shares;
    const dir = this.dir(spec.sandboxId);
    await rm(dir, { recursive: true, force: true });
    await mkdir(join(dir, 'bundle'), { recursive: true });
    // 0600: the spec carries the session's environment, whose values are secrets.
    await writeFile(join(dir, 'bundle', 'config.json'), JSON.stringify(ociSpec(spec, paths)), { mode: 0o600 });
    await writeFile(join(dir, 'paths.json'), JSON.stringify(paths));
    await writeFile(join(dir, 'spec.json'), JSON.stringify(spec), { mode: 0o600 });
    const fifoIn = join(dir, 'agent.in');
    const fifoOut = join(dir, 'agent.out');
    await makeFifos([fifoIn, fifoOut]);
    // The sandbox receives both FIFOs opened read-write: it then holds a reader and a writer of each
    // itself, so the agent never sees EOF or EPIPE when the server goes away, and a restarted server can
    // reopen the FIFOs and carry on (see adopt()).
    const inRW = openSync(fifoIn, fsc.O_RDWR);
    const outRW = openSync(fifoOut, fsc.O_RDWR);
    const grown = await growPipes(this.opts.agentPath, [fifoIn, fifoOut]); // while open, so the pipes exist
    if (grown) this.opts.log?.(`sandbox ${spec.sandboxId}: the channel keeps 64 KiB pipes: ${grown}`);
    const logPath = join(dir, 'sandbox.log');
    const logFd = openSync(logPath, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_APPEND, 0o600);
    try {
      await this.runsc.run([...verb, `--bundle=${join(dir, 'bundle')}`, spec.sandboxId], {
        signal: opts.signal,
        stdio: [inRW, outRW, logFd],
        timeoutMs: 60_000,
      });
    } catch (e) {
      closeSync(inRW);
      closeSync(outRW);
      const tail = (await readFile(logPath, 'utf8').catch(() => '')).trim().split('\n').slice(-3).join(' | ');
      await this.destroy(spec.sandboxId).catch(() => undefined);
      throw tail ? new SandboxError(`${(e as Error).message}: ${tail}`, { cause: e }) : e;
    } finally {
      closeSync(logFd);
    }
    try {
      await this.attach(spec.sandboxId, opts);
      closeSync(inRW);
      closeSync(outRW);
      await this.channel(spec.sandboxId).identity(spec.identity, randomBytes(64));
    } catch (e) {
      await this.destroy(spec.sandboxId).catch(() => undefined);
      throw e;
    }
  }

  /** Opens the host ends of the FIFOs and handshakes with the agent. */
  private async attach(sandboxId: string, opts: CallOptions): Promise<void> {
    const dir = this.dir(sandboxId);
    const rd = openSync(join(dir, 'agent.out'), fsc.O_RDONLY | fsc.O_NONBLOCK);
    const wr = openSync(join(dir, 'agent.in'), fsc.O_WRONLY | fsc.O_NONBLOCK);
    const input = new Socket({ fd: rd, readable: true, writable: false });
    const output = new Socket({ fd: wr, readable: false, writable: true });
    let channel: AgentChannel;
    try {
      channel = await AgentChannel.connect({ input, output, signal: opts.signal, timeoutMs: this.agentTimeoutMs, acceptTcp: this.tcp.acceptorFor(sandboxId) });
    } catch (e) {
      input.destroy();
      output.destroy();
      throw new SandboxError(`agent in sandbox ${sandboxId} did not answer: ${(e as Error).message}`, { cause: e });
    }
    const entry: Live = { channel, stopping: false, paused: false, streams: [input, output] };
    this.live.set(sandboxId, entry);
    channel.onClose(() => {
      if (this.live.get(sandboxId) !== entry) return;
      this.live.delete(sandboxId);
      if (!entry.stopping) void this.reportExit(sandboxId);
    });
  }

  private async reportExit(sandboxId: string): Promise<void> {
    // Read the cgroup first: it still holds the peak and the OOM count while runsc winds the sandbox down.
    const [last, oom] = await Promise.all([readStats(sandboxId).catch(() => undefined), oomKilled(sandboxId)]);
    const st = await this.runsc.state(sandboxId).catch(() => undefined);
    const reason = oom
      ? `out_of_memory: the sandbox was killed at its memory limit of ${Math.round(oom.limitBytes / (1 << 20))} MiB (peak ${last?.peakMemoryBytes ?? 0} bytes)`
      : st ? `sandbox ${st.status}; agent channel closed` : 'sandbox exited';
    for (const l of this.exitListeners) l(sandboxId, reason, last && last.peakMemoryBytes > 0 ? last : undefined);
  }

  async adopt(spec: SandboxSpec, opts: CallOptions = {}): Promise<boolean> {
    if (this.live.has(spec.sandboxId)) return true;
    const marker = await readMarker(this.markerPath(spec.sandboxId));
    if (marker) return this.finishCheckpoint(spec, marker, opts);
    const no = (why: string) => {
      this.opts.log?.(`cannot re-adopt sandbox ${spec.sandboxId}: ${why}`);
      return false;
    };
    if (!existsSync(join(this.dir(spec.sandboxId), 'agent.in'))) return no('its directory has no agent FIFO');
    // runsc talks to the sentry to report state, and a frozen sentry never answers: thaw first. The
    // engine re-applies pause from its record afterwards.
    if ((await freezerState(spec.sandboxId)) !== undefined) await thaw(spec.sandboxId).catch(() => undefined);
    // A failing `runsc state` is not a missing sandbox: asked again, and if it keeps failing the error goes
    // up (recovery retries the session, then fails it with this reason) rather than the sandbox being destroyed.
    // Most sandboxes at a restart simply run: runsc's own state file says so and its sandbox pid is alive.
    // That is read directly; a `runsc state` (a Go binary, 0.3-0.7 s each on a loaded host, 30 of them at a
    // restart of 30 sessions) is asked only when the file does not settle it.
    let st: { status: string; pid: number } | undefined = await runningFromStateFile(join(this.opts.stateDir, 'runsc'), spec.sandboxId);
    for (let attempt = 1; !st; attempt++) {
      try {
        st = await this.runsc.state(spec.sandboxId, { ...opts, timeoutMs: 30_000 });
        if (!st) break;
      } catch (e) {
        this.opts.log?.(`runsc state of ${spec.sandboxId} failed (attempt ${attempt} of ${STATE_ATTEMPTS}): ${(e as Error).message}`);
        if (attempt >= STATE_ATTEMPTS || opts.signal?.aborted) throw e;
        await sleep(250 * attempt);
      }
    }
    if (!st) return no('runsc has no such container');
    if (st.status !== 'running') return no(`runsc state says ${st.status}`);
    try {
      await this.attach(spec.sandboxId, opts);
      return true;
    } catch (e) {
      return no((e as Error).message);
    }
  }

  /** Written before a checkpoint; removed once a snapshot's sandbox runs again or a hibernate's image is whole. */
  private markerPath(sandboxId: string): string {
    this.dir(sandboxId); // validates the id
    return join(this.opts.stateDir, 'snapshotting', `${sandboxId}.json`);
  }

  /**
   * The server stopped in the middle of a checkpoint of this sandbox (its marker is there). Waits for a
   * `runsc checkpoint` still at work (it runs in a session of its own and outlives the server); its done
   * file says whether it succeeded. A hibernate whose checkpoint succeeded is completed (manifest written;
   * false: the machine is in the image, and recovery makes the session hibernated); one that did not is
   * rolled back by re-attaching the sandbox, which still runs. A snapshot's sandbox is re-attached if it
   * runs, or, stopped by a checkpoint that succeeded, restored from the image under the same id and identity.
   */
  private async finishCheckpoint(spec: SandboxSpec, m: CheckpointMarker, opts: CallOptions): Promise<boolean> {
    const id = spec.sandboxId;
    try {
      for (let i = 0; i < 1200; i++) {
        const busy = (await this.processes()).some((p) => p.args.includes('checkpoint') && p.args[p.args.length - 1] === id);
        if (!busy) break;
        await sleep(100);
      }
      const done = existsSync(join(m.imageDir, CHECKPOINT_DONE));
      const manifest: ImageManifest = { version: 1, backend: 'gvisor', ...m.paths };
      if (m.kind === 'hibernate' && done) {
        this.opts.log?.(`completing the hibernation of sandbox ${id} the server was taking when it stopped`);
        await writeFile(join(m.imageDir, MANIFEST), JSON.stringify(manifest));
        return false;
      }
      const st = await this.runsc.state(id, { timeoutMs: 30_000 }).catch(() => undefined);
      if (st?.status === 'running' && existsSync(join(this.dir(id), 'agent.in'))) {
        // runsc may still call a checkpointed sandbox running; only an agent that answers proves it.
        if ((await freezerState(id)) !== undefined) await thaw(id).catch(() => undefined);
        const attached = await this.attach(id, opts).then(() => true, () => false);
        if (attached) return true;
      }
      if (m.kind === 'hibernate' || !done) return false;
      this.opts.log?.(`restoring sandbox ${id} from the snapshot the server was taking when it stopped`);
      await writeFile(join(m.imageDir, MANIFEST), JSON.stringify(manifest));
      await this.destroy(id);
      await this.start(spec, m.paths, ['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${m.imageDir}`], opts);
      return true;
    } catch (e) {
      this.opts.log?.(`cannot finish the interrupted checkpoint of ${id}: ${(e as Error).message}`);
      return false;
    } finally {
      await rm(this.markerPath(id), { force: true });
    }
  }

  /**
   * Every sandbox of this state directory: runsc's state files (not `runsc list`, which would hang on a
   * frozen sandbox), the sandbox directories, and every process carrying this root on its command line,
   * so a sandbox whose state file and directory were never written (a server killed mid-fork) is found too.
   */
  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const p of await this.processes()) if (p.sandboxId) ids.add(p.sandboxId);
    for (const f of await readdir(join(this.opts.stateDir, 'runsc')).catch(() => [] as string[])) {
      const m = /^(.+)_sandbox:(.+)\.state$/.exec(f);
      if (m) ids.add(m[2] as string);
    }
    for (const d of await readdir(join(this.opts.stateDir, 'sandboxes')).catch(() => [] as string[])) ids.add(d);
    return [...ids];
  }

  async pause(sandboxId: string): Promise<void> {
    this.channel(sandboxId);
    await freeze(sandboxId);
    const entry = this.live.get(sandboxId);
    if (entry) entry.paused = true;
    this.watchPaused();
  }

  async resume(sandboxId: string): Promise<void> {
    this.channel(sandboxId);
    await thaw(sandboxId);
    const entry = this.live.get(sandboxId);
    if (entry) entry.paused = false;
  }

  /**
   * A frozen sandbox cannot close its agent channel, and a SIGKILL sent to it (by the OOM killer, an
   * operator, `kill -9`) stays pending until it is thawed: without a look from the host, a dead paused
   * sandbox would show `paused` until someone resumed it. Every PAUSED_WATCH_MS the watch reads each paused
   * sandbox's tasks from its cgroup and /proc; none left, or a SIGKILL pending, is reported as its exit.
   */
  private watchPaused(): void {
    if (this.pausedWatch) return;
    this.pausedWatch = setInterval(() => void this.checkPaused(), PAUSED_WATCH_MS);
    this.pausedWatch.unref();
  }

  private async checkPaused(): Promise<void> {
    const paused = [...this.live].filter(([, e]) => e.paused && !e.stopping);
    if (paused.length === 0 && this.pausedWatch) {
      clearInterval(this.pausedWatch);
      this.pausedWatch = undefined;
    }
    for (const [sandboxId, entry] of paused) {
      const reason = await pausedDeath(sandboxId);
      if (!reason || this.live.get(sandboxId) !== entry || !entry.paused || entry.stopping) continue;
      this.live.delete(sandboxId);
      entry.stopping = true;
      entry.channel.close();
      for (const l of this.exitListeners) l(sandboxId, reason);
    }
  }

  async checkpoint(sandboxId: string, imageDir: string, opts: CallOptions & { leaveRunning?: boolean } = {}): Promise<CheckpointResult> {
    const entry = this.live.get(sandboxId);
    if (!entry) throw new NotFoundError('sandbox', sandboxId);
    const paths = JSON.parse(await readFile(join(this.dir(sandboxId), 'paths.json'), 'utf8')) as SandboxPaths;
    // A checkpoint that runs out of room kills the sandbox (runsc stops it whatever the outcome): refuse
    // before touching it when the image cannot fit, so the session carries on as it was.
    await ensureRoom(sandboxId, imageDir);
    // The marker lets a server killed mid-checkpoint finish or roll it back on restart (finishCheckpoint).
    const marker = this.markerPath(sandboxId);
    await mkdir(dirname(marker), { recursive: true });
    await writeFile(marker, JSON.stringify({ imageDir, paths, kind: opts.leaveRunning ? 'snapshot' : 'hibernate' } satisfies CheckpointMarker));
    // runsc cannot checkpoint a frozen sandbox: thaw first (a paused session stays paused in the record).
    await thaw(sandboxId);
    await entry.channel.quiesce(opts);
    entry.stopping = true;
    try {
      await this.runsc.run(['checkpoint', ...CHECKPOINT_FLAGS, `--image-path=${imageDir}`, sandboxId], {
        signal: opts.signal,
        timeoutMs: 300_000,
        doneFile: join(imageDir, CHECKPOINT_DONE),
      });
    } catch (e) {
      entry.stopping = false;
      await rm(marker, { force: true });
      if (/no space left on device/i.test((e as Error).message)) {
        throw new NoSpaceError(`no space left for the checkpoint image in ${imageDir}: ${(e as Error).message}`, { cause: e, details: { imageDir } });
      }
      throw e;
    }
    const manifest: ImageManifest = { version: 1, backend: 'gvisor', ...paths };
    await writeFile(join(imageDir, MANIFEST), JSON.stringify(manifest));
    this.live.delete(sandboxId);
    entry.channel.close();
    if (opts.leaveRunning) {
      // runsc's own --leave-running restores the sandbox with runsc's stdio, not the agent FIFOs, so
      // the driver restores it itself, under the same id and identity: processes and memory carry on.
      const spec = JSON.parse(await readFile(join(this.dir(sandboxId), 'spec.json'), 'utf8')) as SandboxSpec;
      try {
        await this.destroy(sandboxId);
        await this.start(spec, paths, ['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${imageDir}`], opts);
      } finally {
        await rm(marker, { force: true });
      }
    } else {
      await rm(marker, { force: true }); // the image is whole (manifest written): nothing left to finish
      // The stopped container is removed off the critical path; a later destroy() of it waits for this.
      const cleanup = this.destroy(sandboxId)
        .catch((e) => this.opts.log?.(`cleanup of ${sandboxId} failed: ${(e as Error).message}`))
        .finally(() => this.cleanups.delete(sandboxId));
      this.cleanups.set(sandboxId, cleanup);
    }
    // Every file of the image: without compression runsc writes the pages beside the state (pages.img).
    let bytes = 0;
    for (const f of await readdir(imageDir)) bytes += (await stat(join(imageDir, f)).catch(() => undefined))?.size ?? 0;
    return { bytes };
  }

  async destroy(sandboxId: string): Promise<void> {
    const pending = this.cleanups.get(sandboxId);
    if (pending) return void (await pending);
    const entry = this.live.get(sandboxId);
    if (entry) {
      entry.stopping = true;
      this.live.delete(sandboxId);
      entry.channel.close();
    }
    this.tcp.forget(sandboxId);
    await this.reap(sandboxId);
    await rm(this.dir(sandboxId), { recursive: true, force: true });
  }

  /**
   * Kills and reaps every process of a sandbox and removes its runsc state and cgroups, whatever
   * `runsc state` says: under load (dozens of deletes at once) runsc can report a live sandbox as gone,
   * or fail, and trusting it leaked the sandbox. The kernel's view decides: the sandbox's cgroup members
   * and every process naming it under this root. Throws if any is left, so the caller never reports a
   * sandbox gone that still runs.
   */
  private async reap(sandboxId: string): Promise<void> {
    // A frozen task does not die of SIGKILL until thawed.
    await thaw(sandboxId).catch(() => undefined);
    const st = await this.runsc.state(sandboxId, { timeoutMs: 10_000 }).catch(() => undefined);
    if (st && (st.status === 'running' || st.status === 'created')) {
      await this.runsc.run(['kill', sandboxId, 'KILL'], { allowFail: true, timeoutMs: 10_000 }).catch(() => undefined);
    }
    // Dozens of reaps at once each scan /proc: the wait grows (20→250 ms) so the scans do not starve the exits.
    const deadline = Date.now() + 60_000;
    for (let round = 0; ; round++) {
      const pids = new Set([...(await cgroupPids(sandboxId)), ...pidsOf(await this.processes(), sandboxId)]);
      if (pids.size === 0) break;
      if (Date.now() > deadline) throw new SandboxError(`sandbox ${sandboxId} still has processes ${[...pids].join(', ')} after SIGKILL`);
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      if (round % 10 === 0) await thaw(sandboxId).catch(() => undefined);
      await sleep(Math.min(20 + round * 10, 250));
    }
    await this.runsc.run(['delete', '--force', sandboxId], { allowFail: true, timeoutMs: 30_000 }).catch(() => undefined);
    // runsc keeps a state file, a lock and a socket per sandbox; one it failed to delete goes here.
    const root = join(this.opts.stateDir, 'runsc');
    for (const f of await readdir(root).catch(() => [] as string[])) {
      if (f.startsWith(`${sandboxId}_sandbox:`) || f === `runsc-${sandboxId}.sock`) await rm(join(root, f), { force: true });
    }
    let left = await removeCgroups(sandboxId);
    for (let i = 0; left.length > 0 && i < 50; i++) {
      await sleep(20); // the last task can take a moment to leave its cgroup after it died
      left = await removeCgroups(sandboxId);
    }
    if (left.length > 0) throw new SandboxError(`cannot remove the cgroups of sandbox ${sandboxId}: ${left.join(', ')}`);
  }

  /** This state directory's runsc processes (see host.ts). */
  private processes(): Promise<RunscProcess[]> {
    return runscProcesses(join(this.opts.stateDir, 'runsc'), join(this.opts.stateDir, 'sandboxes'));
  }

  async stats(sandboxId: string): Promise<SandboxStats> {
    this.channel(sandboxId);
    return readStats(sandboxId);
  }

  onExit(listener: (sandboxId: string, reason: string, last?: SandboxStats) => void): void {
    this.exitListeners.push(listener);
  }

  async close(): Promise<void> {
    if (this.pausedWatch) clearInterval(this.pausedWatch);
    this.pausedWatch = undefined;
    await Promise.all(this.cleanups.values());
    for (const [, entry] of this.live) {
      entry.stopping = true;
      entry.channel.close();
      for (const s of entry.streams) s.destroy();
    }
    this.live.clear();
  }

  // ---- commands and files: AgentBackedDriver, over this channel ----------------------------------

  // No commandEnv: the agent (PID 1) has the spec's environment from the OCI spec and passes it on itself.
  protected override async agentChannel(sandboxId: string): Promise<AgentChannel> {
    return this.channel(sandboxId);
  }
}

/** Tries of `runsc state` when re-adopting a sandbox (see adopt). */
const STATE_ATTEMPTS = 4;

/** How often paused sandboxes are looked at from the host, ms. */
const PAUSED_WATCH_MS = 1000;

async function readManifest(imageDir: string): Promise<ImageManifest> {
  try {
    const m = JSON.parse(await readFile(join(imageDir, MANIFEST), 'utf8')) as ImageManifest;
    if (m.backend !== 'gvisor') throw new InvalidStateError(`image in ${imageDir} was made by the ${m.backend} backend`);
    return m;
  } catch (e) {
    if (e instanceof InvalidStateError) throw e;
    throw new NotFoundError('checkpoint image', imageDir, { cause: e });
  }
}
