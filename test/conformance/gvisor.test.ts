import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { GvisorDriver } from '../../src/drivers/gvisor/driver.js';
import { ensureRootfs, rootfsImagePath } from '../../src/drivers/image/rootfs.js';
import { AGENT_PATH, IMAGE_CACHE, gvisorMissing, skipReason } from '../helpers/env.js';
import { driverConformance, type ConformanceTarget } from './driver-suite.js';
import { processConformance } from './process-suite.js';
import { socketConformance } from './socket-suite.js';
import { terminalConformance } from './terminal-suite.js';

if (skipReason('gVisor conformance', gvisorMissing())) {
  describe.skip('driver conformance: gvisor', () => it('needs runsc', () => undefined));
} else {
  const target = async (): Promise<ConformanceTarget> => {
    const stateDir = await mkdtemp(join(tmpdir(), 'berth-gvisor-'));
    const rootfs = await ensureRootfs({ cacheDir: IMAGE_CACHE });
    const driver = new GvisorDriver({ stateDir, rootfs, rootfsImage: rootfsImagePath(rootfs), agentPath: AGENT_PATH });
    await driver.probe();
    return {
      driver,
      async cleanup() {
        for (const id of await driver.list()) await driver.destroy(id).catch(() => undefined);
        await driver.close();
        await rm(stateDir, { recursive: true, force: true });
      },
    };
  };
  driverConformance('gvisor', target);
  processConformance('gvisor', target);
  socketConformance('gvisor', target);
  terminalConformance('gvisor', target);
}
