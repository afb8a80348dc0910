/**
 * What the real-component tests share: the image cache (built once per machine, like the server's), the
 * agent binary, and a check that prints why a test is skipped when the machine lacks a component.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const REPO = resolve(import.meta.dirname, '..', '..');
export const IMAGE_CACHE = join(REPO, '.berth', 'images');
export const AGENT_PATH = join(REPO, 'dist', 'agent', 'berth-agent');

export function hasCommand(cmd: string, args: string[] = ['--version']): boolean {
  const r = spawnSync(cmd, args, { stdio: 'ignore' });
  return !r.error && r.status === 0;
}

/** Returns a reason to skip, or undefined when runsc and the cgroup freezer are there. */
export function gvisorMissing(): string | undefined {
  if (!hasCommand('runsc')) return 'runsc is not installed (apt-get install runsc)';
  if (!existsSync('/sys/fs/cgroup/freezer')) return 'the cgroup v1 freezer is not mounted';
  if (process.getuid?.() !== 0) return 'gVisor tests need root';
  return undefined;
}

export function skipReason(what: string, reason: string | undefined): boolean {
  if (reason) console.warn(`SKIPPED ${what}: ${reason}`);
  return reason !== undefined;
}
