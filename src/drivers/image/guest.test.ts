/**
 * The QEMU guest image, built for real from Debian packages (the first run on a machine takes ~45 s with
 * the root filesystem; later runs find it cached). Checks what the guest's boot relies on.
 */
import { open, readFile, stat } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { AGENT_PATH, IMAGE_CACHE, hasCommand, skipReason } from '../../../test/helpers/env.js';
import { cpioNewc } from './guest-cpio.js';
import { DEFAULT_GUEST_RECIPE, ensureGuestImage, withAgent } from './guest.js';

/** Entries of (possibly concatenated) newc archives: name → {mode, data}. */
function unCpio(buf: Buffer): Map<string, { mode: number; data: Buffer }> {
  const out = new Map<string, { mode: number; data: Buffer }>();
  let off = 0;
  while (off + 110 <= buf.length) {
    if (buf.toString('latin1', off, off + 6) !== '070701') {
      off += 4; // zero padding between archives
      continue;
    }
    const field = (i: number) => parseInt(buf.toString('latin1', off + 6 + i * 8, off + 14 + i * 8), 16);
    const nameSize = field(11);
    const size = field(6);
    const name = buf.toString('utf8', off + 110, off + 110 + nameSize - 1);
    const dataAt = (off + 110 + nameSize + 3) & ~3;
    if (name !== 'TRAILER!!!') out.set(name, { mode: field(1), data: buf.subarray(dataAt, dataAt + size) });
    off = (dataAt + size + 3) & ~3;
  }
  return out;
}

describe('cpioNewc', () => {
  it('writes entries the newc way, 4-byte aligned, with device nodes and a trailer', () => {
    const a = cpioNewc([
      { type: 'dir', path: 'dev' },
      { type: 'char', path: 'dev/console', major: 5, minor: 1 },
      { type: 'file', path: '/init', data: Buffer.from('#!/bin/sh\n'), mode: 0o755 },
      { type: 'symlink', path: 'sh', target: 'bin/busybox' },
    ]);
    expect(a.length % 4).toBe(0);
    const e = unCpio(a);
    expect([...e.keys()]).toEqual(['dev', 'dev/console', 'init', 'sh']);
    expect(e.get('init')).toMatchObject({ mode: 0o100755, data: Buffer.from('#!/bin/sh\n') });
    expect(e.get('dev/console')?.mode).toBe(0o020600);
    expect(e.get('sh')?.data.toString()).toBe('bin/busybox');
    expect(() => cpioNewc([{ type: 'dir', path: '../x' }])).toThrow();
  });
});

const missing = hasCommand('apt-get', ['--version']) && hasCommand('mkfs.ext4', ['-V']) ? undefined : 'apt-get or mkfs.ext4 missing';

if (skipReason('guest image build', missing)) {
  describe.skip('ensureGuestImage', () => it('needs apt-get and e2fsprogs', () => undefined));
} else {
  describe('ensureGuestImage', () => {
    it('builds once, then answers from the cache with the same image', async () => {
      const a = await ensureGuestImage({ cacheDir: IMAGE_CACHE });
      const t0 = performance.now();
      const b = await ensureGuestImage({ cacheDir: IMAGE_CACHE });
      expect(performance.now() - t0).toBeLessThan(1000);
      expect(b).toEqual(a);
      expect(a.pin.package).toMatch(/^linux-image-\d.*-amd64$/);
      expect(a.kernelFormat).toBe('elf'); // booted through PVH, no decompression in the guest
      const fh = await open(a.kernel, 'r');
      const magic = Buffer.alloc(4);
      await fh.read(magic, 0, 4, 0);
      await fh.close();
      expect(magic.toString('latin1')).toBe('\x7fELF');
      const disk = await stat(a.baseDisk);
      expect(disk.size).toBe(DEFAULT_GUEST_RECIPE.diskSizeMb * 2 ** 20);
      expect(disk.mode & 0o777).toBe(0o444);
    }, 600_000);

    it('packs an initramfs with busybox, the modules in dependency order (unsigned), and the agent appended', async () => {
      const img = await ensureGuestImage({ cacheDir: IMAGE_CACHE });
      const e = unCpio(await readFile(await withAgent(img, AGENT_PATH)));
      expect(e.get('init')?.mode).toBe(0o100755);
      expect(e.get('init')?.data.toString()).toContain('switch_root /newroot /run/berth/agent --device /dev/virtio-ports/berth.0');
      expect(e.has('bin/busybox')).toBe(true);
      expect(e.get('dev/console')?.mode).toBe(0o020600);
      const order = e.get('lib/modules/order')!.data.toString().trim().split('\n');
      for (const m of ['virtio_pci.ko', 'virtio_blk.ko', 'virtio_console.ko', 'ext4.ko', 'jbd2.ko', 'crc32c_generic.ko']) expect(order).toContain(m);
      expect(order.indexOf('virtio.ko')).toBeLessThan(order.indexOf('virtio_blk.ko'));
      expect(order.indexOf('jbd2.ko')).toBeLessThan(order.indexOf('ext4.ko'));
      for (const m of order) expect(e.get(`lib/modules/${m}`)!.data.subarray(-28).toString('latin1')).not.toBe('~Module signature appended~\n');
      const agent = e.get('berth-agent');
      expect(agent?.mode).toBe(0o100755);
      expect(agent?.data.equals(await readFile(AGENT_PATH))).toBe(true);
    }, 600_000);
  });
}
