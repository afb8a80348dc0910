/**
 * Background processes end to end (issue 9 §1) on real runsc with a real `berth serve` process and the real
 * CLI: started with `berth exec --background`, listed by `berth ps`, read by `berth logs` after hibernate →
 * wake, and followed across a SIGKILL of the server and its restart with nothing lost or repeated.
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { Berth } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { freePort, runscIds, serveProcess } from '../helpers/serve-process.js';

const skip = skipReason('background processes e2e', gvisorMissing());
const BIN = join(REPO, 'bin', 'berth');

describe.skipIf(skip)('background processes: hibernate, wake and a server SIGKILL (real runsc, real server, real CLI)', () => {
  let dataDir = '';
  let child: ChildProcess | undefined;
  afterAll(async () => {
    child?.kill('SIGKILL');
    if (dataDir) {
      for (const id of runscIds(dataDir)) {
        spawnSync('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/berth/${id}/freezer.state`]);
        spawnSync('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'delete', '--force', id], { timeout: 30_000 });
      }
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('keeps output and exit through hibernate → wake and through a server SIGKILL; follow resumes without loss or repeat', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'berth-proc-'));
    const port = await freePort();
    child = await serveProcess(dataDir, port);
    const url = `http://127.0.0.1:${port}`;
    const token = (await readFile(join(dataDir, 'root.key'), 'utf8')).trim();
    const berth = new Berth({ url, token });
    const cli = (args: string[]) => {
      const r = spawnSync(process.execPath, [BIN, ...args], { env: { ...process.env, BERTH_URL: url, BERTH_TOKEN: token }, encoding: 'utf8', timeout: 120_000 });
      return { code: r.status, stdout: r.stdout, stderr: r.stderr };
    };
    const s = await berth.sessions.create();

    // 1. Started by the CLI; answers at once while the command runs on.
    const started = cli(['exec', s.id, '--background', '--json', '--', 'sh', '-c', 'for i in 1 2 3; do echo line$i; sleep 0.2; done; echo warn >&2; sleep 2; echo late; exit 4']);
    expect(started.code).toBe(0);
    const { execId, pid } = JSON.parse(started.stdout) as { execId: string; pid: number };
    expect(execId).toMatch(/^exe_/);
    expect(pid).toBeGreaterThan(1);
    const ps = JSON.parse(cli(['ps', s.id, '--json']).stdout) as Array<{ execId: string; state: string; argv: string[] }>;
    expect(ps).toEqual([expect.objectContaining({ execId, state: 'running', argv: ['sh', '-c', expect.stringContaining('line$i')] })]);

    // 2. Hibernate mid-run (the process and its ring go to disk with the machine), wake, follow to the end.
    await sleep(900);
    await s.hibernate();
    expect(s.state).toBe('hibernated');
    await s.wake();
    const logs = cli(['logs', s.id, execId, '--follow']);
    expect(logs.stdout).toBe('line1\nline2\nline3\nlate\n');
    expect(logs.stderr).toBe('warn\n');
    expect(logs.code).toBe(4); // --follow ends with the command's exit status
    const info = await s.processes.get(execId).info();
    expect(info).toMatchObject({ state: 'exited', exitCode: 4, stdoutBytes: 23, stderrBytes: 5 });

    // 3. A follower across a server SIGKILL: the SDK resumes from its cursor; every line exactly once.
    const counter = await s.exec(['sh', '-c', 'i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo n$i; sleep 0.1; done'], { background: true });
    const seen: string[] = [];
    let offset = -1;
    let exitCode: number | null = null;
    const follow = (async () => {
      for await (const ev of counter.output({ follow: true, reconnects: 240 })) {
        if (ev.type === 'exit') {
          exitCode = ev.exit.code;
          break;
        }
        if (ev.type !== 'stdout') continue;
        if (offset >= 0) expect(ev.offset).toBe(offset); // contiguous across the reconnect
        offset = ev.offset + ev.data.byteLength;
        seen.push(Buffer.from(ev.data).toString());
      }
    })();
    await sleep(1500);
    child.kill('SIGKILL');
    await new Promise((r) => child?.once('exit', r));
    await sleep(1000); // the command keeps running inside the sandbox while no server exists
    child = await serveProcess(dataDir, port);
    await follow;
    expect(exitCode).toBe(0);
    expect(seen.join('')).toBe(Array.from({ length: 60 }, (_, i) => `n${i + 1}\n`).join(''));
    // Detaching never stopped anything, and the first command's record survived the restart too.
    expect(cli(['logs', s.id, execId]).stdout).toBe('line1\nline2\nline3\nlate\n');
    expect(cli(['logs', s.id, 'exe_00000000000000000000']).code).toBe(1);
    expect(cli(['logs', s.id, 'exe_00000000000000000000']).stderr).toContain('not_found');
    await s.terminate();
  }, 600_000);
});
