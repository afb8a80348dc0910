/**
 * What the gVisor driver sets up on the host around a sandbox, read back from the kernel: the sandboxes'
 * CPU weight against the server's (cgroup.ts, SANDBOXES_CPU_SHARES) and the agent channel's 1 MiB FIFO
 * buffers (host.ts, CHANNEL_PIPE_BYTES). Both start from Linux's defaults, so the test fails if either
 * is not set.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SANDBOXES_CPU_SHARES } from '../../src/drivers/gvisor/cgroup.js';
import { GvisorDriver } from '../../src/drivers/gvisor/driver.js';
import { CHANNEL_PIPE_BYTES } from '../../src/drivers/gvisor/host.js';
import { ensureRootfs, rootfsImagePath } from '../../src/drivers/image/rootfs.js';
import { AGENT_PATH, IMAGE_CACHE, gvisorMissing, hasCommand, skipReason } from '../helpers/env.js';
import { specFor } from './driver-suite.js';

const SHARES = '/sys/fs/cgroup/cpu/berth/cpu.shares';
const skip = skipReason('gVisor host set-up', gvisorMissing() ?? (hasCommand('python3') ? undefined : 'python3 is not installed (it reads the pipe size: Node has no fcntl)'));

/** F_GETPIPE_SZ of a FIFO, read by python3 (Node has no fcntl). */
function pipeSize(path: string): number {
  const r = spawnSync('python3', ['-c', 'import os, fcntl, sys; print(fcntl.fcntl(os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK), 1032))', path], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(r.stderr);
  return Number(r.stdout.trim());
}

describe.skipIf(skip)('the gVisor driver on the host', () => {
  it('weighs the sandboxes below the server for CPU, and gives the agent channel 1 MiB pipes', { timeout: 120_000 }, async () => {
    writeFileSync(SHARES, '1024'); // Linux's default: the driver must set it again
    const stateDir = await mkdtemp(join(tmpdir(), 'berth-gvisor-host-'));
    const rootfs = await ensureRootfs({ cacheDir: IMAGE_CACHE });
    const d = new GvisorDriver({ stateDir, rootfs, rootfsImage: rootfsImagePath(rootfs), agentPath: AGENT_PATH });
    const spec = specFor('host');
    try {
      await d.create(spec);
      expect(Number(readFileSync(SHARES, 'utf8'))).toBe(SANDBOXES_CPU_SHARES);
      expect(readFileSync(`/sys/fs/cgroup/cpu/berth/${spec.sandboxId}/cgroup.procs`, 'utf8').trim()).not.toBe(''); // its processes are under it
      const dir = join(stateDir, 'sandboxes', spec.sandboxId);
      expect([pipeSize(join(dir, 'agent.in')), pipeSize(join(dir, 'agent.out'))]).toEqual([CHANNEL_PIPE_BYTES, CHANNEL_PIPE_BYTES]);
    } finally {
      await d.destroy(spec.sandboxId).catch(() => undefined);
      await d.close();
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
