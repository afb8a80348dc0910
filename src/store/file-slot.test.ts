import { mkdtempSync, readFileSync, rmSync, statSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FILE_SLOT_DELAY_MS, FileSlot } from './file-slot.js';

const dir = mkdtempSync(join(tmpdir(), 'berth-slot-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('FileSlot', () => {
  it('writes the newest text after the delay, coalescing a burst into few writes', async () => {
    const path = join(dir, 'a');
    const slot = new FileSlot({ path, what: 'test file', mode: 0o600 });
    slot.writeSync('0\n');
    for (let i = 1; i <= 100; i++) slot.set(`${i}\n`);
    expect(readFileSync(path, 'utf8')).toBe('0\n'); // nothing on the request path
    await sleep(FILE_SLOT_DELAY_MS * 4);
    expect(readFileSync(path, 'utf8')).toBe('100\n');
    expect(statSync(path).mode & 0o777).toBe(0o600);
  });

  it('settled() writes what waits at once, and a text set during a write follows it', async () => {
    const path = join(dir, 'b');
    const slot = new FileSlot({ path, what: 'test file' });
    slot.set('1\n');
    await slot.settled();
    expect(readFileSync(path, 'utf8')).toBe('1\n');
    slot.set('2\n');
    const s = slot.settled();
    slot.set('3\n'); // while the write of 2 may run
    await s;
    await slot.settled();
    expect(readFileSync(path, 'utf8')).toBe('3\n');
  });

  it('a failed write is logged once, reported by settled(), and tried again until it succeeds', async () => {
    const parent = join(dir, 'gone');
    const path = join(parent, 'c');
    const lines: string[] = [];
    const slot = new FileSlot({ path, what: 'test file', log: (l) => lines.push(l) });
    slot.set('1\n');
    slot.set('2\n');
    await expect(slot.settled()).rejects.toMatchObject({ code: 'unavailable', details: { committed: true } });
    await expect(slot.settled()).rejects.toMatchObject({ code: 'unavailable' });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/test file could not be written/);
    mkdirSync(parent);
    await slot.settled();
    expect(readFileSync(path, 'utf8')).toBe('2\n');
    expect(slot.failure).toBeUndefined();
  });
});
