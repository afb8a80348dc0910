import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { BackendName } from '../core/index.js';
import { createBerth } from './compose.js';

describe('createBerth', () => {
  it('refuses an unknown backend name as a config error before it opens anything', async () => {
    const parent = await mkdtemp(join(tmpdir(), 'berth-compose-'));
    try {
      const dataDir = join(parent, 'data');
      await expect(createBerth({ dataDir, backends: ['firecracker' as BackendName] })).rejects.toMatchObject({
        code: 'config',
        details: { field: 'backends', value: 'firecracker' },
      });
      expect(existsSync(dataDir)).toBe(false);
    } finally {
      await rm(parent, { recursive: true, force: true });
    }
  });
});
