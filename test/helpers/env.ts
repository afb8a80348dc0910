/**
 * What the real-component tests share: the image cache (built once per machine, like the server's), the
 * agent binary, and a check that prints why a test is skipped when the machine lacks a component. On CI
 * (`CI=true`) a real-component test may not be skipped: skipReason throws, so the file fails to load, and
 * the summary reporter fails the run for any skip that did not pass through here.
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

/** Whether this run is a CI run (`CI` set to `true` or `1`, as CI services and .ci/run set it). */
export function isCi(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.CI === 'true' || env.CI === '1';
}

/** Thrown on CI instead of skipping a real-component suite: a CI run that skips it proves nothing. */
export class SkippedOnCiError extends Error {
  readonly code = 'skipped_on_ci';
  constructor(what: string, reason: string) {
    super(`${what} cannot be skipped on CI (CI=true): ${reason}`);
    this.name = 'SkippedOnCiError';
  }
}

/** True (and a line saying why) when the suite must be skipped; on CI it throws SkippedOnCiError instead. */
export function skipReason(what: string, reason: string | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  if (reason === undefined) return false;
  if (isCi(env)) throw new SkippedOnCiError(what, reason);
  console.warn(`SKIPPED ${what}: ${reason}`);
  return true;
}
