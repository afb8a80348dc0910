/**
 * The disk room of a QEMU session (issue 7 §8): ext4Room reads a real mkfs.ext4 image's superblock (checked
 * against dumpe2fs, e2fsprogs' own reader), and layerSize turns a diskMb into the layer's disk size or refuses it.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasCommand, skipReason } from '../../../test/helpers/env.js';
import { ext4Room, layerSize } from './host.js';

const MIB = 1024 * 1024;
const skip = skipReason('ext4 room', hasCommand('mkfs.ext4', ['-V']) && hasCommand('dumpe2fs', ['-V']) ? undefined : 'e2fsprogs is not installed (apt-get install e2fsprogs)');

describe.skipIf(skip)('a QEMU session disk room', () => {
  let dir = '';
  let img = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-ext4-'));
    img = join(dir, 'base.img');
    await writeFile(img, '');
    await truncate(img, 96 * MIB);
    const r = spawnSync('mkfs.ext4', ['-q', '-F', '-O', '^has_journal', img], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('reads size and free room from the superblock as dumpe2fs does', async () => {
    const dump = spawnSync('dumpe2fs', ['-h', img], { encoding: 'utf8' }).stdout;
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(dump)![1]);
    const room = await ext4Room(img);
    expect(room.sizeBytes).toBe(96 * MIB);
    expect(room.freeBytes).toBe(field('Free blocks') * field('Block size'));
    expect(room.freeBytes).toBeGreaterThan(80 * MIB);
  });

  it('refuses a file that is not ext4', async () => {
    const junk = join(dir, 'junk.img');
    await writeFile(junk, Buffer.alloc(4096));
    await expect(ext4Room(junk)).rejects.toThrow(/holds no ext4 filesystem/);
  });

  it('sizes the layer: none for the image\'s own room, grown with ext4\'s overhead past it, refused below it', () => {
    const room = { sizeBytes: 4096 * MIB, freeBytes: 3700 * MIB + 123 };
    expect(layerSize(room, undefined)).toBeUndefined();
    expect(layerSize(room, 3700)).toBeUndefined();
    // 1000 MiB more, plus 2% for the new groups' inode tables and bitmaps, in 16 MiB steps.
    expect(layerSize(room, 4700)).toBe((4096 + 1024) * MIB);
    expect(() => layerSize(room, 3000)).toThrow(expect.objectContaining({ code: 'invalid_argument', details: { field: 'diskMb', min: 3700 } }));
  });
});
