import { spawnSync } from 'node:child_process';
import { ensureRootfs } from '../src/drivers/image/rootfs.js';
import { IMAGE_CACHE, REPO, gvisorMissing } from './helpers/env.js';

/** Builds once what the real-component tests share, so no test pays for it under its own timeout. */
export default async function setup(): Promise<void> {
  const agent = spawnSync(process.execPath, ['scripts/build-agent.mjs'], { cwd: REPO, stdio: 'inherit' });
  if (agent.status !== 0) throw new Error('building berth-agent failed');
  if (!gvisorMissing()) await ensureRootfs({ cacheDir: IMAGE_CACHE, log: (l) => console.log(`[image] ${l}`) });
}
