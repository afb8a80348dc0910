/** Engine options are checked once, when the engine is built: a bad value is a ConfigError naming it, never clamped. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { systemClock, type BackendName } from '../core/index.js';
import { createTestEngine } from '../../test/helpers/engine.js';
import { MemoryDriver } from '../drivers/memory/driver.js';
import { composeEngine } from '../server/compose.js';
import { openSqliteStore } from '../store/sqlite.js';
import { LocalSnapshotStore } from '../store/snapshot-dir.js';
import { newSecret } from './auth.js';
import { SessionManager } from './manager.js';
import { DEFAULT_SESSION, LIMITS, resolveForkConcurrency, resolveIdleSweepMs, resolveSettings } from './options.js';

const config = (field: string) => expect.objectContaining({ code: 'config', details: expect.objectContaining({ field }) });

describe('forkConcurrency', () => {
  it('defaults to 4 and takes 1..64', () => {
    expect(resolveForkConcurrency(undefined)).toBe(4);
    expect(resolveForkConcurrency(1)).toBe(1);
    expect(resolveForkConcurrency(64)).toBe(64);
  });
  it('refuses 0, negatives, fractions, NaN and more than 64', () => {
    for (const v of [0, -1, 1.5, Number.NaN, 65, Number.POSITIVE_INFINITY]) expect(() => resolveForkConcurrency(v), String(v)).toThrow(config('forkConcurrency'));
  });
  it('SessionManager refuses forkConcurrency: 0 when it is built (it used to stall the first fork)', async () => {
    const store = openSqliteStore({ path: ':memory:', clock: systemClock });
    const dir = await mkdtemp(join(tmpdir(), 'berth-options-'));
    try {
      const driver = new MemoryDriver({});
      expect(
        () =>
          new SessionManager({ store, audit: store.audit, snapshots: new LocalSnapshotStore(join(dir, 's')), drivers: { [driver.name]: driver }, rootKeyHash: '0'.repeat(64), clock: systemClock, forkConcurrency: 0 }),
      ).toThrow(config('forkConcurrency'));
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('idleSweepMs', () => {
  it('defaults to 1000; 0 turns the sweeper off', () => {
    expect(resolveIdleSweepMs(undefined)).toBe(1000);
    expect(resolveIdleSweepMs(0)).toBe(0);
  });
  it('refuses negatives, fractions and more than a day', () => {
    for (const v of [-1, 0.5, 86_400_001, Number.NaN]) expect(() => resolveIdleSweepMs(v), String(v)).toThrow(config('idleSweepMs'));
  });
  it('composeEngine refuses it before it starts anything', async () => {
    const store = openSqliteStore({ path: ':memory:', clock: systemClock });
    const dir = await mkdtemp(join(tmpdir(), 'berth-options-'));
    try {
      const driver = new MemoryDriver({});
      await expect(
        composeEngine({ dataDir: dir, store, snapshots: new LocalSnapshotStore(join(dir, 's')), drivers: { [driver.name]: driver }, rootKey: newSecret('btr'), clock: systemClock, idleSweepMs: -5 }),
      ).rejects.toThrow(config('idleSweepMs'));
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('memory floor', () => {
  const invalid = (field: string) => expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field }) });

  it('is LIMITS.memoryMb.min, raised per backend by minMemoryMb', () => {
    const d = { ...DEFAULT_SESSION, minMemoryMb: { qemu: 128 } };
    expect(resolveSettings({ memoryMb: LIMITS.memoryMb.min, backend: 'gvisor' }, d).settings.memoryMb).toBe(LIMITS.memoryMb.min);
    expect(() => resolveSettings({ memoryMb: 127, backend: 'qemu' }, d)).toThrow(invalid('memoryMb'));
    expect(resolveSettings({ memoryMb: 128, backend: 'qemu' }, d).settings.memoryMb).toBe(128);
    // A capability below the engine's floor does not lower it.
    expect(() => resolveSettings({ memoryMb: LIMITS.memoryMb.min - 1 }, { ...DEFAULT_SESSION, minMemoryMb: { gvisor: 1 } })).toThrow(invalid('memoryMb'));
  });

  it('refuses a backend name outside BACKENDS', () => {
    expect(() => resolveSettings({ backend: 'firecracker' as BackendName }, DEFAULT_SESSION)).toThrow(invalid('backend'));
  });

  it('comes from the driver: composeEngine passes each wired driver\'s capabilities.minMemoryMb', async () => {
    const t = await createTestEngine({ driver: { name: 'qemu', capabilities: { minMemoryMb: 200 } } });
    try {
      await expect(t.engine.createSession(t.root, { backend: 'qemu', memoryMb: 199 })).rejects.toMatchObject({
        code: 'invalid_argument',
        details: { field: 'memoryMb', min: 200 },
      });
      const { session } = await t.engine.createSession(t.root, { backend: 'qemu', memoryMb: 200 });
      expect(session.settings.memoryMb).toBe(200);
    } finally {
      await t.close();
    }
  });
});

describe('file room (diskMb)', () => {
  const invalid = (field: string) => expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field }) });
  const d = { ...DEFAULT_SESSION, writesInMemory: { gvisor: true, qemu: false } };

  it('where files live in memory: default half of memoryMb, at most memoryMb, at least the floor', () => {
    expect(resolveSettings({ memoryMb: 512 }, d).settings.diskMb).toBe(256);
    expect(resolveSettings({ memoryMb: 64 }, d).settings.diskMb).toBe(32);
    expect(resolveSettings({ memoryMb: 512, diskMb: 512 }, d).settings.diskMb).toBe(512);
    expect(() => resolveSettings({ memoryMb: 512, diskMb: 513 }, d)).toThrow(invalid('diskMb'));
    expect(() => resolveSettings({ memoryMb: 512, diskMb: LIMITS.diskMb.min - 1 }, d)).toThrow(invalid('diskMb'));
    expect(() => resolveSettings({ memoryMb: 512, diskMb: 100.5 }, d)).toThrow(invalid('diskMb'));
  });

  it('where files go to a disk: none by default, a given one kept for the driver (which knows the image)', () => {
    expect(resolveSettings({ backend: 'qemu', memoryMb: 256 }, d).settings.diskMb).toBeUndefined();
    expect(resolveSettings({ backend: 'qemu', memoryMb: 256, diskMb: 8192 }, d).settings.diskMb).toBe(8192);
    expect(() => resolveSettings({ backend: 'qemu', diskMb: LIMITS.diskMb.max + 1 }, d)).toThrow(invalid('diskMb'));
  });

  it('comes from the driver: composeEngine passes capabilities.writesInMemory', async () => {
    const t = await createTestEngine();
    try {
      const { session } = await t.engine.createSession(t.root, { memoryMb: 256 });
      expect(session.settings.diskMb).toBe(128);
    } finally {
      await t.close();
    }
  });
});
