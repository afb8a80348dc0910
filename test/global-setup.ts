import { spawnSync } from 'node:child_process';
import { ensureGuestImage } from '../src/drivers/image/guest.js';
import { ensureRootfs } from '../src/drivers/image/rootfs.js';
import { IMAGE_CACHE, REPO, gvisorMissing, hasCommand } from './helpers/env.js';

/** Builds once what the real-component tests share, so no test pays for it under its own timeout. */
export default async function setup(): Promise<void> {
  const agent = spawnSync(process.execPath, ['scripts/build-agent.mjs'], { cwd: REPO, stdio: 'inherit' });
  if (agent.status !== 0) throw new Error('building berth-agent failed');
  const log = (l: string) => console.log(`[image] ${l}`);
  if (!gvisorMissing()) await ensureRootfs({ cacheDir: IMAGE_CACHE, log });
  if (hasCommand('qemu-system-x86_64')) await ensureGuestImage({ cacheDir: IMAGE_CACHE, log });
}
