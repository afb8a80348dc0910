import { MemoryDriver } from '../../src/drivers/memory/driver.js';
import { driverConformance } from './driver-suite.js';

// No skip: the in-memory driver needs nothing from the machine, so it always runs the shared suite.
driverConformance(
  'memory',
  async () => {
    const driver = new MemoryDriver();
    await driver.probe();
    return {
      driver,
      async cleanup() {
        for (const id of await driver.list()) await driver.destroy(id);
        await driver.close();
      },
    };
  },
  { timeoutMs: 20_000 },
);
