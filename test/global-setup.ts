import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DESKTOP_GUEST_RECIPE, ensureGuestImage } from '../src/drivers/image/guest.js';
import { DESKTOP_ROOTFS_RECIPE, ensureRootfs } from '../src/drivers/image/rootfs.js';
import { IMAGE_CACHE, REPO, gvisorMissing, hasCommand } from './helpers/env.js';

function consoleStale(): boolean {
  const built = join(REPO, 'dist', 'console', 'index.html');
  if (!existsSync(built)) return true;
  const at = statSync(built).mtimeMs;
  const newest = (dir: string): number =>
    Math.max(0, ...readdirSync(dir, { withFileTypes: true }).map((e) => (e.isDirectory() ? newest(join(dir, e.name)) : statSync(join(dir, e.name)).mtimeMs)));
  return Math.max(newest(join(REPO, 'src', 'console')), newest(join(REPO, 'src', 'sdk')), newest(join(REPO, 'src', 'protocol'))) > at;
}

/** Builds once what the real-component tests share, so no test pays for it under its own timeout. */
export default async function setup(): Promise<void> {
  const agent = spawnSync(process.execPath, ['scripts/build-agent.mjs'], { cwd: REPO, stdio: 'inherit' });
  if (agent.status !== 0) throw new Error('building berth-agent failed');
  // dist/ once, here: tests that spawn bin/berth or pack the package read it while other test files run, so
  // none of them may rewrite it (tsc writes files in place; a concurrent reader saw half a module).
  const tsc = spawnSync(process.execPath, [join(REPO, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], { cwd: REPO, encoding: 'utf8' });
  if (tsc.status !== 0) throw new Error(`compiling dist/ failed:\n${tsc.stdout}${tsc.stderr}`);
  // bin/berth runs the bundle of what tsc just wrote (an older bundle would be passed over for dist/src).
  const bundle = spawnSync(process.execPath, ['scripts/bundle.mjs'], { cwd: REPO, encoding: 'utf8' });
  if (bundle.status !== 0) throw new Error(`bundling dist/ failed:\n${bundle.stdout}${bundle.stderr}`);
  // The web console (dist/console), rebuilt when a source under src/console is newer than the build.
  if (consoleStale()) {
    const vite = spawnSync(process.execPath, [join(REPO, 'node_modules', 'vite', 'bin', 'vite.js'), 'build', '--config', 'src/console/vite.config.mjs'], { cwd: REPO, encoding: 'utf8' });
    if (vite.status !== 0) throw new Error(`building the console failed:\n${vite.stdout}${vite.stderr}`);
  }
  const log = (l: string) => console.log(`[image] ${l}`);
  if (!gvisorMissing()) {
    await ensureRootfs({ cacheDir: IMAGE_CACHE, log });
    // The desktop variant (issue 11): built here, once, so no desktop test pays minutes under its timeout.
    await ensureRootfs({ cacheDir: IMAGE_CACHE, recipe: DESKTOP_ROOTFS_RECIPE, log });
  }
  if (hasCommand('qemu-system-x86_64')) {
    await ensureGuestImage({ cacheDir: IMAGE_CACHE, log });
    await ensureGuestImage({ cacheDir: IMAGE_CACHE, recipe: DESKTOP_GUEST_RECIPE, log }); // the QEMU desktop (issue 11)
  }
}
