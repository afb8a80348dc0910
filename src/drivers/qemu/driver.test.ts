/**
 * QemuDriver against a real guest: the Debian image built from packages, a real QEMU (KVM if the boot
 * probe passes, else TCG), the real agent. Nothing is mocked.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../test/conformance/driver-suite.js';
import { newMachineId, type SandboxSpec } from '../../core/index.js';
import { AGENT_PATH, IMAGE_CACHE, hasCommand, skipReason } from '../../../test/helpers/env.js';
import { CONSOLE_RING_BYTES } from './console.js';
import { QemuDriver } from './driver.js';

const missing = hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)';

let seq = 0;
function spec(tag: string, identity: Partial<SandboxSpec['identity']> = {}): SandboxSpec {
  return {
    sandboxId: `q-${tag}-${process.pid}-${seq++}`,
    limits: { memoryMb: 256, cpus: 1 },
    env: { BERTH_TEST: 'qemu' },
    identity: { hostname: `host-${tag}`, machineId: newMachineId(), generation: 1, reason: 'create', ...identity },
    network: 'none', image: 'base',
  };
}

async function* chunks(buf: Buffer, size = 64 * 1024): AsyncIterable<Uint8Array> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}
async function collect(src: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of src) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** An image's files once it is committed: its manifest (written last, after the fsyncs) there, its pending note gone. */
async function committed(dir: string): Promise<string[]> {
  const done = (names: string[]) => names.includes('berth-image.json') && !names.includes('berth-image.pending.json');
  for (let i = 0; i < 100 && !done(await readdir(dir)); i++) await sleep(50);
  return (await readdir(dir)).sort();
}

if (skipReason('QEMU driver', missing)) {
  describe.skip('QemuDriver', () => it('needs qemu-system-x86_64', () => undefined));
} else {
  describe('QemuDriver (real guest)', () => {
    let d: QemuDriver;
    let stateDir: string;
    let images: string;
    const log: string[] = [];

    const sh = async (id: string, script: string) => {
      const r = await run(d, id, ['sh', '-c', script]);
      return { ...r, out: r.stdout, err: r.stderr };
    };
    const counter = async (id: string) => Number((await sh(id, 'cat /tmp/n')).out);

    beforeAll(async () => {
      stateDir = await mkdtemp(join(tmpdir(), 'berth-qemu-'));
      images = await mkdtemp(join(tmpdir(), 'berth-qemu-img-'));
      d = new QemuDriver({ stateDir, cacheDir: IMAGE_CACHE, agentPath: AGENT_PATH, log: (l) => log.push(l) });
      await d.probe();
      console.log(`[qemu] ${log.join(' / ')}`);
    }, 10 * 60_000);

    afterAll(async () => {
      for (const id of (await d?.list()) ?? []) await d.destroy(id).catch(() => undefined);
      await d?.close();
      await rm(stateDir, { recursive: true, force: true });
      await rm(images, { recursive: true, force: true });
    }, 60_000);

    it('boots, runs, moves files, pauses, hibernates and wakes, forks with fresh identity, and cleans up', async () => {
      // ---- boot and exec
      const s = spec('main');
      const t0 = performance.now();
      await d.create(s);
      const echo = await sh(s.sandboxId, 'echo hello; echo $BERTH_TEST; echo oops >&2; exit 3');
      console.log(`[qemu] boot to first exec ${(performance.now() - t0).toFixed(0)} ms`);
      expect(echo).toMatchObject({ out: 'hello\nqemu\n', err: 'oops\n', code: 3, signal: null, timedOut: false });
      expect((await sh(s.sandboxId, 'hostname; cat /etc/machine-id')).out).toBe(`${s.identity.hostname}\n${s.identity.machineId}\n`);
      expect((await sh(s.sandboxId, 'ls /sys/class/net')).out.trim()).toBe('lo'); // no network device
      expect(Math.abs(Number((await sh(s.sandboxId, 'date +%s')).out) - Date.now() / 1000)).toBeLessThan(3);
      expect((await sh(s.sandboxId, 'nproc; grep MemTotal /proc/meminfo')).out).toMatch(/^1\nMemTotal:\s+\d+ kB\n$/);
      const timed = await d.exec(s.sandboxId, { argv: ['sleep', '30'], timeoutMs: 300 });
      expect(await timed.wait()).toMatchObject({ timedOut: true });

      // ---- files, binary-safe
      const blob = randomBytes(3 * 1024 * 1024 + 5);
      await d.mkdir(s.sandboxId, '/root/a/b', { parents: true });
      expect(await d.writeFile(s.sandboxId, '/root/a/b/blob', chunks(blob), { mode: 0o600 })).toBe(blob.length);
      expect(sha(await collect(await d.readFile(s.sandboxId, '/root/a/b/blob')))).toBe(sha(blob));
      expect(await d.stat(s.sandboxId, '/root/a/b/blob')).toMatchObject({ type: 'file', size: blob.length, mode: 0o600 });
      expect((await d.listFiles(s.sandboxId, '/root/a/b')).map((e) => e.name)).toEqual(['blob']);
      expect((await sh(s.sandboxId, 'sha256sum /root/a/b/blob')).out.split(' ')[0]).toBe(sha(blob));
      await expect(d.readFile(s.sandboxId, '/root/missing')).rejects.toMatchObject({ code: 'not_found' });
      await d.remove(s.sandboxId, '/root/a', { recursive: true });
      await expect(d.stat(s.sandboxId, '/root/a')).rejects.toMatchObject({ code: 'not_found' });

      // ---- pause / resume: a loop stops while paused, goes on after
      await sh(s.sandboxId, 'setsid sh -c "i=0; while :; do i=\\$((i+1)); echo \\$i > /tmp/n; sleep 0.05; done" >/dev/null 2>&1 &');
      await sleep(600);
      const st = await d.stats(s.sandboxId);
      expect(st.cpuSeconds).toBeGreaterThan(0);
      expect(st.memoryBytes).toBeGreaterThan(50 << 20);
      expect(st.peakMemoryBytes).toBeGreaterThanOrEqual(st.memoryBytes);
      const beforePause = await counter(s.sandboxId);
      await d.pause(s.sandboxId);
      await sleep(700);
      await d.resume(s.sandboxId);
      const afterPause = await counter(s.sandboxId);
      expect(afterPause - beforePause).toBeLessThan(6); // 700 ms frozen would be ~14 steps
      const guestNow = Number((await sh(s.sandboxId, 'date +%s')).out);
      expect(Math.abs(guestNow - Date.now() / 1000)).toBeLessThan(3); // clock resynced after the stop

      // ---- hibernate: memory and disk into the image; the QEMU process is gone
      await d.writeFile(s.sandboxId, '/root/state.txt', chunks(Buffer.from('before')));
      const img = join(images, 'hib');
      await mkdir(img);
      const n0 = await counter(s.sandboxId);
      const ck = await d.checkpoint(s.sandboxId, img);
      expect(ck.bytes).toBeGreaterThan(10 << 20);
      expect(await committed(img)).toEqual(['berth-image.json', 'disk.qcow2', 'memory.bin']);
      await expect(d.exec(s.sandboxId, { argv: ['true'] })).rejects.toMatchObject({ code: 'not_found' });
      expect(await d.list()).not.toContain(s.sandboxId);
      await sleep(1500); // while hibernated, the guest's clock must not advance its loop

      // ---- wake: the loop carries on from where it stood
      const w = { ...spec('wake', { hostname: 'host-main', machineId: s.identity.machineId, generation: 2, reason: 'wake' }) };
      const tw = performance.now();
      await d.restore(w, img);
      console.log(`[qemu] wake ${(performance.now() - tw).toFixed(0)} ms`);
      const n1 = await counter(w.sandboxId);
      expect(n1).toBeGreaterThanOrEqual(n0);
      expect(n1).toBeLessThan(n0 + 15); // it did not run on while hibernated, nor restart from 1
      await sleep(500);
      expect(await counter(w.sandboxId)).toBeGreaterThan(n1);
      expect((await collect(await d.readFile(w.sandboxId, '/root/state.txt'))).toString()).toBe('before');
      expect(JSON.parse((await sh(w.sandboxId, 'cat /run/berth/resume')).out)).toMatchObject({ generation: 2, reason: 'wake' });
      expect(Math.abs(Number((await sh(w.sandboxId, 'date +%s')).out) - Date.now() / 1000)).toBeLessThan(3);

      // ---- fork: two branches of one image, each with its own disk layer and identity
      const b1 = spec('b1', { hostname: 'branch-one', generation: 3, reason: 'fork' });
      const b2 = spec('b2', { hostname: 'branch-two', generation: 3, reason: 'fork' });
      await Promise.all([d.restore(b1, img), d.restore(b2, img)]);
      for (const b of [b1, b2]) {
        expect((await sh(b.sandboxId, 'hostname; cat /etc/machine-id')).out).toBe(`${b.identity.hostname}\n${b.identity.machineId}\n`);
        const n = await counter(b.sandboxId);
        expect(n).toBeGreaterThanOrEqual(n0);
        await sleep(300);
        expect(await counter(b.sandboxId)).toBeGreaterThan(n);
        // QEMU's vmgenid gave this process a new generation id; Linux's vmgenid driver saw it change and
        // reseeded the kernel's random pool (drivers/virt/vmgenid.c → add_vmfork_randomness()).
        const seen = await sh(b.sandboxId, 'ls /sys/bus/acpi/devices/ | grep QEMUVGID; readlink /sys/bus/acpi/devices/QEMUVGID:00/driver; dmesg | grep -c "crng reseeded due to virtual machine fork"');
        const [dev, drv, count] = seen.out.trim().split('\n');
        expect(dev).toBe('QEMUVGID:00');
        expect(drv).toMatch(/vmgenid$/);
        expect(Number(count)).toBeGreaterThanOrEqual(1);
      }
      await d.writeFile(b1.sandboxId, '/root/only-b1', chunks(Buffer.from('b1')));
      await d.writeFile(b1.sandboxId, '/root/state.txt', chunks(Buffer.from('changed-in-b1')));
      await expect(d.stat(b2.sandboxId, '/root/only-b1')).rejects.toMatchObject({ code: 'not_found' });
      expect((await collect(await d.readFile(b2.sandboxId, '/root/state.txt'))).toString()).toBe('before');
      expect((await collect(await d.readFile(w.sandboxId, '/root/state.txt'))).toString()).toBe('before');
      const sample = async (id: string) => (await sh(id, 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \\n"')).out;
      const uuid = async (id: string) => (await sh(id, 'cat /proc/sys/kernel/random/uuid')).out;
      const [r1, r2, rw] = await Promise.all([sample(b1.sandboxId), sample(b2.sandboxId), sample(w.sandboxId)]);
      expect(new Set([r1, r2, rw]).size).toBe(3);
      expect(await uuid(b1.sandboxId)).not.toBe(await uuid(b2.sandboxId));

      // ---- snapshot while running: the branch carries on, processes and all
      const live = join(images, 'live');
      await mkdir(live);
      const m0 = await counter(b1.sandboxId);
      await d.checkpoint(b1.sandboxId, live, { leaveRunning: true });
      await sleep(300);
      expect(await counter(b1.sandboxId)).toBeGreaterThan(m0);
      expect(await committed(live)).toEqual(['berth-image.json', 'disk.qcow2', 'memory.bin']);

      // ---- destroy leaves nothing behind
      for (const id of [w.sandboxId, b1.sandboxId, b2.sandboxId]) {
        await d.destroy(id);
        await d.destroy(id); // idempotent
      }
      expect(await d.list()).toEqual([]);
      expect(await readdir(stateDir)).toEqual([]);
    }, 300_000);

    it('adopts a running machine after close() (a server restart) and reports a machine that dies on its own', async () => {
      const s = spec('adopt');
      await d.create(s);
      await sh(s.sandboxId, 'echo kept > /tmp/k');
      // A guest flooding its console (4 MiB here) leaves at most the ring's 1 MiB on the host's disk, the newest part.
      const flood = await sh(s.sandboxId, 'head -c 4194304 /dev/zero | tr "\\0" x > /dev/ttyS0; echo END-OF-FLOOD > /dev/ttyS0');
      expect(flood.code).toBe(0);
      const serialLog = join(stateDir, s.sandboxId, 'serial.log');
      for (let i = 0; i < 100 && !(await readFile(serialLog, 'utf8').catch(() => '')).includes('END-OF-FLOOD'); i++) await sleep(100);
      await d.close();
      const kept = await readFile(serialLog, 'utf8');
      expect(kept).toContain('END-OF-FLOOD');
      expect((await stat(serialLog)).size).toBeLessThanOrEqual(CONSOLE_RING_BYTES);
      expect(kept.length).toBeGreaterThan(CONSOLE_RING_BYTES / 2);
      const d2 = new QemuDriver({ stateDir, cacheDir: IMAGE_CACHE, agentPath: AGENT_PATH });
      try {
        expect(await d2.adopt(s)).toBe(true);
        const h = await d2.exec(s.sandboxId, { argv: ['cat', '/tmp/k'] });
        const out: Buffer[] = [];
        for await (const ev of h) if (ev.type === 'stdout') out.push(Buffer.from(ev.data));
        expect(Buffer.concat(out).toString()).toBe('kept\n');
        // A machine paused when the server went away stays paused; its agent is attached on resume.
        await d2.pause(s.sandboxId);
        await d2.close();
        const d3 = new QemuDriver({ stateDir, cacheDir: IMAGE_CACHE, agentPath: AGENT_PATH });
        expect(await d3.adopt(s)).toBe(true);
        await expect(d3.exec(s.sandboxId, { argv: ['true'] })).rejects.toMatchObject({ code: 'invalid_state' });
        await d3.resume(s.sandboxId);
        expect(await (await d3.exec(s.sandboxId, { argv: ['cat', '/tmp/k'] })).wait()).toMatchObject({ code: 0 });
        await d3.close();
        expect(await d2.adopt(s)).toBe(true);
        const exits: Array<[string, string]> = [];
        d2.onExit((id, reason) => exits.push([id, reason]));
        const p = await d2.exec(s.sandboxId, { argv: ['sh', '-c', 'echo o > /proc/sysrq-trigger'] }); // power off
        await p.wait().catch(() => undefined);
        for (let i = 0; i < 100 && exits.length === 0; i++) await sleep(100);
        expect(exits[0]?.[0]).toBe(s.sandboxId);
        expect(await d2.adopt(s)).toBe(false);
        await d2.destroy(s.sandboxId);
        expect(await readdir(stateDir)).toEqual([]);
      } finally {
        await d2.close();
      }
      d = new QemuDriver({ stateDir, cacheDir: IMAGE_CACHE, agentPath: AGENT_PATH });
    }, 120_000);
  });
}
