import { describe, expect, it } from 'vitest';
import { StartupProgress } from './starting.js';

describe('StartupProgress', () => {
  it('shows the earliest phase still under way while backends get ready side by side, each with its own lines', () => {
    let t = 0;
    const p = new StartupProgress(() => t);
    expect(p.view()).toMatchObject({ phase: 'starting', detail: null });
    p.set('gvisor', 'preparing the gVisor backend');
    p.set('qemu', 'preparing the QEMU backend');
    p.line('debootstrap: unpacking', 'gvisor');
    p.line('waiting for the base image', 'qemu');
    t = 1500;
    expect(p.view()).toEqual({ phase: 'gvisor', message: 'preparing the gVisor backend', detail: 'debootstrap: unpacking', elapsedS: 1.5 });
    p.done('gvisor');
    expect(p.view()).toMatchObject({ phase: 'qemu', detail: 'waiting for the base image' });
    p.done('qemu');
    expect(p.view()).toMatchObject({ phase: 'qemu', message: 'preparing the QEMU backend' }); // the last to end, until the next begins
    p.set('recovery', 'recovering sessions');
    p.line('  ', 'recovery');
    p.line('3 of 30', 'recovery');
    p.line('late', 'gvisor'); // a phase that ended takes no more lines
    expect(p.view()).toMatchObject({ phase: 'recovery', detail: '3 of 30' });
    p.done('nothing-under-way');
    expect(p.view().phase).toBe('recovery');
  });

  it('tells its listeners of every change', () => {
    const p = new StartupProgress(() => 0);
    const seen: string[] = [];
    const off = p.onChange((v) => seen.push(`${v.phase}:${v.detail ?? ''}`));
    p.set('gvisor', 'g');
    p.line('x', 'gvisor');
    p.done('gvisor');
    off();
    p.set('recovery', 'r');
    expect(seen).toEqual(['gvisor:', 'gvisor:x', 'gvisor:x']);
  });
});
