import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { commandInstalled } from './command.js';

describe('commandInstalled', () => {
  const dir = mkdtempSync(join(tmpdir(), 'berth-cmd-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('finds a command on PATH and an executable path, and refuses what is missing, not executable or a directory', async () => {
    const script = join(dir, 'tool');
    writeFileSync(script, '#!/bin/sh\nexit 0\n');
    chmodSync(script, 0o755);
    const plain = join(dir, 'plain');
    writeFileSync(plain, 'data');
    expect(await commandInstalled('sh')).toBe(true);
    expect(await commandInstalled(script)).toBe(true);
    expect(await commandInstalled('berth-no-such-command')).toBe(false);
    expect(await commandInstalled(join(dir, 'missing'))).toBe(false);
    expect(await commandInstalled(plain)).toBe(false);
    expect(await commandInstalled(dir)).toBe(false);
    expect(await commandInstalled('a name with "quotes" and $(touch x)')).toBe(false);
  });
});
