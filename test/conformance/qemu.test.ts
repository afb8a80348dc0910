import { mkdtemp, rm } from 'node:fs/promises';
import { describe, it } from 'vitest';
import { QemuDriver } from '../../src/drivers/qemu/driver.js';
import { AGENT_PATH, IMAGE_CACHE, hasCommand, skipReason } from '../helpers/env.js';
import { driverConformance, type ConformanceTarget } from './driver-suite.js';
import { processConformance } from './process-suite.js';
import { socketConformance } from './socket-suite.js';
import { terminalConformance } from './terminal-suite.js';

const missing = hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)';
if (skipReason('QEMU conformance', missing)) {
  describe.skip('driver conformance: qemu', () => it('needs qemu', () => undefined));
} else {
  const target = async (): Promise<ConformanceTarget> => {
    // Short path: QMP and agent socket paths must fit in 107 bytes.
    const stateDir = await mkdtemp('/tmp/bq-');
    const driver = new QemuDriver({ stateDir, cacheDir: IMAGE_CACHE, agentPath: AGENT_PATH });
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
  driverConformance('qemu', target, { timeoutMs: 120_000 });
  processConformance('qemu', target, { timeoutMs: 120_000 });
  socketConformance('qemu', target, { timeoutMs: 120_000 });
  terminalConformance('qemu', target, { timeoutMs: 120_000 });
}

