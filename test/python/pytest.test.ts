/**
 * The Python SDK (sdk/python) under `npm test`: installs it as a user would on Debian 12 (a venv over
 * Debian's Python with --system-site-packages, so Debian's python3-httpx serves the dependency, and an
 * offline `pip install --no-build-isolation --no-index`), then runs its pytest suite against a real server
 * with real gVisor sessions. A pytest failure fails this test with pytest's output; a pytest skip fails it
 * too. On CI a missing Python package is a failure (skipReason throws), never a skip.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';

const PYTHON = '/usr/bin/python3';
const SDK = join(REPO, 'sdk', 'python');
/** Debian packages the suite needs, by the module they provide (scripts/setup.mjs installs them). */
const MODULES: Record<string, string> = {
  httpx: 'python3-httpx',
  setuptools: 'python3-setuptools',
  pytest: 'python3-pytest',
  pytest_asyncio: 'python3-pytest-asyncio',
  mypy: 'python3-mypy',
  venv: 'python3-venv',
  ensurepip: 'python3-venv',
};

function pythonMissing(): string | undefined {
  const probe = spawnSync(PYTHON, ['-c', `import importlib.util as u, sys; print(",".join(m for m in sys.argv[1:] if u.find_spec(m) is None))`, ...Object.keys(MODULES)], {
    encoding: 'utf8',
  });
  if (probe.error || probe.status !== 0) return `${PYTHON} is not there (apt-get install python3)`;
  const missing = probe.stdout.trim().split(',').filter(Boolean);
  if (missing.length === 0) return undefined;
  return `Debian's Python lacks ${missing.join(', ')} (apt-get install ${[...new Set(missing.map((m) => MODULES[m]))].join(' ')})`;
}

function run(cmd: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs: number }): Promise<{ status: number | null; out: string }> {
  return new Promise((done) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    // SIGINT lets pytest run its fixtures' teardown (the server and its sessions are stopped).
    const timer = setTimeout(() => child.kill('SIGINT'), opts.timeoutMs);
    child.on('close', (status) => {
      clearTimeout(timer);
      done({ status, out });
    });
  });
}

const skip = skipReason('python SDK', gvisorMissing() ?? pythonMissing());

describe.skipIf(skip)('the Python SDK', () => {
  let dir = '';
  let venvPython = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-pysdk-'));
    // pip builds in the source directory (build/, *.egg-info): build a copy so the checkout stays clean.
    const src = join(dir, 'src');
    cpSync(SDK, src, { recursive: true, filter: (p) => !['build', '__pycache__', '.pytest_cache'].includes(basename(p)) && !p.endsWith('.egg-info') });
    const venv = join(dir, 'venv');
    const mk = await run(PYTHON, ['-m', 'venv', '--system-site-packages', venv], { cwd: dir, timeoutMs: 120_000 });
    expect(mk.status, mk.out).toBe(0);
    venvPython = join(venv, 'bin', 'python');
    const pip = await run(venvPython, ['-m', 'pip', 'install', '--no-build-isolation', '--no-index', '--disable-pip-version-check', '-q', src], { cwd: dir, timeoutMs: 300_000 });
    expect(pip.status, `pip install --no-build-isolation --no-index ./sdk/python failed:\n${pip.out}`).toBe(0);
  });

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('installs offline and passes its pytest suite against a real server', async () => {
    const env = { ...process.env, BERTH_SDK_EXPECT_INSTALLED: '1', PYTHONDONTWRITEBYTECODE: '1', PYTHONPATH: '' };
    const r = await run(venvPython, ['-m', 'pytest', 'sdk/python/tests', '-q', '-p', 'no:cacheprovider', '--durations=5'], { cwd: REPO, env, timeoutMs: 1_500_000 });
    const summary = r.out.trim().split('\n').at(-1) ?? '';
    console.log(`pytest: ${summary}`);
    const warnings = /=+ warnings summary =+\n([\s\S]*?)\n-- Docs/.exec(r.out);
    if (warnings) console.warn(`pytest warnings:\n${warnings[1]}`);
    expect(r.status, `pytest failed (exit ${r.status}):\n${r.out}`).toBe(0);
    expect(summary, `pytest skipped tests:\n${r.out}`).not.toMatch(/skipped|deselected/);
    expect(summary).toMatch(/^=*\s*\d+ passed/);
  }, 1_800_000);
});
