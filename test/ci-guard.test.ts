/**
 * The CI guard itself: on CI a real-component suite cannot be skipped, neither through skipReason (it
 * throws) nor any other way (the summary reporter fails the run). The reporter is tested by running vitest
 * on a fixture with a skipped test, as CI would.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, isCi, skipReason } from './helpers/env.js';

const FIXTURE = join(REPO, 'test', 'fixtures', 'ci-guard');
const VITEST = join(REPO, 'node_modules', 'vitest', 'vitest.mjs');

function runFixture(env: NodeJS.ProcessEnv): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [VITEST, 'run', '--config', join(FIXTURE, 'vitest.config.ts')], { cwd: FIXTURE, env, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const withoutCi = (): NodeJS.ProcessEnv => {
  const env = { ...process.env };
  delete env.CI;
  return env;
};

describe('skipping real-component suites on CI', () => {
  it('skipReason skips off CI, throws skipped_on_ci on CI, and never skips when nothing is missing', () => {
    expect(skipReason('a suite', 'runsc is missing', {})).toBe(true);
    expect(skipReason('a suite', undefined, { CI: 'true' })).toBe(false);
    const e = (() => {
      try {
        skipReason('a suite', 'runsc is missing', { CI: 'true' });
      } catch (x) {
        return x as { code?: string };
      }
      return undefined;
    })();
    expect(e?.code).toBe('skipped_on_ci');
    expect(isCi({ CI: '1' })).toBe(true);
    expect(isCi({ CI: 'false' })).toBe(false);
  });

  it('a run with a skipped test fails on CI and passes off CI', () => {
    const ci = runFixture({ ...withoutCi(), CI: 'true' });
    expect(ci.out).toContain('tests: 1 passed, 0 failed, 1 skipped');
    expect(ci.status).toBe(1);
    const local = runFixture(withoutCi());
    expect(local.out).toContain('tests: 1 passed, 0 failed, 1 skipped');
    expect(local.status).toBe(0);
  });
});
