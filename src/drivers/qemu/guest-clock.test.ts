import { describe, expect, it } from 'vitest';
import type { AgentChannel } from '../agent/channel.js';
import { syncClockSoon, type ClockedMachine } from './guest-clock.js';

/** A channel whose exec fails as a closed one does. */
const closedChannel = { exec: () => Promise.reject(new Error('the agent channel was closed')) } as unknown as AgentChannel;

describe('syncClockSoon', () => {
  it('logs a sync that failed on a machine still running', async () => {
    const lines: string[] = [];
    const m: ClockedMachine = { channel: closedChannel, spec: { sandboxId: 'sbx-a' }, stopping: false };
    syncClockSoon((l) => lines.push(l), m);
    await m.clockSync;
    expect(lines).toEqual(['clock sync in sbx-a failed: the agent channel was closed']);
    await new Promise((r) => setImmediate(r));
    expect(m.clockSync).toBeUndefined(); // the settled sync is forgotten
  });

  it('stays quiet when the machine was being stopped (its channel closing cut the sync short)', async () => {
    const lines: string[] = [];
    const m: ClockedMachine = { channel: closedChannel, spec: { sandboxId: 'sbx-b' }, stopping: false };
    syncClockSoon((l) => lines.push(l), m);
    m.stopping = true; // destroy() sets it before closing the channel
    await m.clockSync;
    expect(lines).toEqual([]);
  });
});
