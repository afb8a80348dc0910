import { constants as fsc } from 'node:fs';
import { access, mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { GuestImage } from '../image/guest.js';
import { createLayer, logTail, pidAlive, spawnDetached } from './host.js';
import { machineConfig, machinePaths, qemuArgv } from './machine.js';

/**
 * Which accelerator QEMU should use here. /dev/kvm existing proves little: on some hosts (a PVM-only
 * KVM inside a VM, as on Berth's CI) it opens fine and QEMU then aborts on an MSR write or hangs before the
 * guest's first instruction. So the probe boots the real guest under -enable-kvm and waits for the agent
 * to answer; anything less within the deadline means TCG (multi-threaded), which is always there.
 */
export type Accel = 'kvm' | 'tcg';

export interface AccelVerdict {
  accel: Accel;
  /** Why KVM was or was not chosen, for logs and the report. */
  reason: string;
}

export interface ProbeOptions {
  image: GuestImage;
  /** The image's initramfs with the agent (see withAgent). */
  initrd: string;
  /** How long a KVM guest may take to reach its agent, ms. Default 8000 (a KVM boot takes well under 2 s). */
  timeoutMs?: number;
  log?: (line: string) => void;
}

let cached: Promise<AccelVerdict> | undefined;

/** The verdict for this process: probed once, then cached. */
export function probeAccel(opts: ProbeOptions): Promise<AccelVerdict> {
  cached ??= runProbe(opts).then((v) => {
    opts.log?.(`qemu accelerator: ${v.accel} (${v.reason})`);
    return v;
  });
  return cached;
}

/** Forgets the cached verdict (tests). */
export function resetAccelProbe(): void {
  cached = undefined;
}

async function runProbe(opts: ProbeOptions): Promise<AccelVerdict> {
  try {
    await access('/dev/kvm', fsc.R_OK | fsc.W_OK);
  } catch (e) {
    return { accel: 'tcg', reason: `/dev/kvm is not usable: ${(e as NodeJS.ErrnoException).code ?? String(e)}` };
  }
  // A short directory: unix socket paths must stay under 108 bytes.
  const dir = await mkdtemp(join(tmpdir(), 'berth-kvm-'));
  const paths = machinePaths(dir);
  let pid: number | undefined;
  try {
    await createLayer(opts.image.baseDisk, paths.disk);
    const cfg = machineConfig({
      accel: 'kvm',
      memoryMb: 256,
      cpus: 1,
      image: { key: opts.image.key, buildId: opts.image.buildId, kernel: opts.image.kernel, initrd: opts.initrd, baseDisk: opts.image.baseDisk },
    });
    const started = Date.now();
    const proc = spawnDetached(qemuArgv(cfg, paths, { name: 'kvm-probe' }), join(dir, 'qemu.log'));
    pid = proc.pid;
    let exited: string | undefined;
    void proc.exited.then((x) => (exited = x.signal ? `QEMU was killed by ${x.signal}` : `QEMU exited with ${x.code}`));
    const deadline = started + (opts.timeoutMs ?? 8000);
    const answered = await agentHello(paths.agentSocket, deadline, () => exited);
    if (answered === true) return { accel: 'kvm', reason: `a KVM guest reached its agent in ${Date.now() - started} ms` };
    await sleep(50); // let QEMU's last words reach its log
    const said = await logTail(join(dir, 'qemu.log'), 2);
    return { accel: 'tcg', reason: `KVM boot test failed: ${exited ?? answered}${said ? ` (${said})` : ''}` };
  } catch (e) {
    return { accel: 'tcg', reason: `KVM boot test failed: ${(e as Error).message}` };
  } finally {
    if (pid !== undefined && pidAlive(pid)) process.kill(pid, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Connects to the agent's port and says hello (PROTOCOL.md: `H <nonce>` → `h <nonce> …`) until it
 * answers; resolves true, or a reason when QEMU died or the deadline passed.
 */
export async function agentHello(socketPath: string, deadline: number, dead: () => string | undefined): Promise<true | string> {
  let sock: Socket | undefined;
  try {
    while (!sock) {
      const why = dead();
      if (why) return why;
      if (Date.now() > deadline) return 'QEMU never opened the agent socket';
      sock = await new Promise<Socket | undefined>((resolve) => {
        const s = connect(socketPath);
        s.once('connect', () => resolve(s));
        s.once('error', () => {
          s.destroy();
          resolve(undefined);
        });
      });
      if (!sock) await sleep(10);
    }
    const nonce = Math.random().toString(36).slice(2, 10);
    const s = sock;
    return await new Promise<true | string>((resolve) => {
      let buf = '';
      const timer = setInterval(() => {
        const why = dead();
        if (why) finish(why);
        else if (Date.now() > deadline) finish('the guest agent did not answer in time');
        else s.write(`H ${nonce}\n`);
      }, 100);
      const finish = (v: true | string) => {
        clearInterval(timer);
        resolve(v);
      };
      s.on('data', (b: Buffer) => {
        buf = (buf + b.toString('latin1')).slice(-4096);
        if (buf.includes(`h ${nonce} `)) finish(true);
      });
      s.on('close', () => finish(dead() ?? 'the agent socket closed'));
      s.on('error', () => undefined);
      s.write(`H ${nonce}\n`);
    });
  } finally {
    sock?.destroy();
  }
}
