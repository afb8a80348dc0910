import { MemoryDriver } from '../../src/drivers/memory/driver.js';
import { driverConformance, type ConformanceTarget } from './driver-suite.js';
import { processConformance } from './process-suite.js';
import { socketConformance } from './socket-suite.js';
import { terminalConformance } from './terminal-suite.js';

// No skip: the in-memory driver needs nothing from the machine, so it always runs the shared suite.
const target = async (): Promise<ConformanceTarget> => {
  const driver = new MemoryDriver();
  await driver.probe();
  return {
    driver,
    async cleanup() {
      for (const id of await driver.list()) await driver.destroy(id);
      await driver.close();
    },
  };
};
driverConformance('memory', target, { timeoutMs: 20_000 });
processConformance('memory', target, { timeoutMs: 20_000 });
socketConformance('memory', target, { timeoutMs: 20_000 });
terminalConformance('memory', target, { timeoutMs: 20_000 });
