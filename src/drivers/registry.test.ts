import { describe, expect, it } from 'vitest';
import { BACKENDS } from '../core/index.js';
import { DRIVERS, backendList } from './registry.js';

const config = expect.objectContaining({ code: 'config', details: expect.objectContaining({ field: 'backends' }) });

describe('the driver registry', () => {
  it('has one entry per name in BACKENDS, and no other', () => {
    expect(Object.keys(DRIVERS).sort()).toEqual([...BACKENDS].sort());
    for (const b of BACKENDS) expect(DRIVERS[b].preparing.length).toBeGreaterThan(0);
  });

  it('takes a list of known backends, an empty one included', () => {
    expect(backendList(BACKENDS)).toEqual([...BACKENDS]);
    expect(backendList(['qemu'])).toEqual(['qemu']);
    expect(backendList([])).toEqual([]);
  });

  it('refuses an unknown name (never another backend in its place) and a name given twice', () => {
    expect(() => backendList(['gvisor', 'firecracker'])).toThrow(config);
    expect(() => backendList(['QEMU'])).toThrow(config);
    expect(() => backendList(['qemu', 'qemu'])).toThrow(config);
  });
});
