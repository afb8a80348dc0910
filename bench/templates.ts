/**
 * Template rows: a session created from a template (Berth's HTTP API through the SDK: restore, agent
 * handshake, fresh identity, records) against a raw `runsc restore --detach` of the very same image
 * directory, with a bundle made for it the same way the driver makes one. Interleaved, one run.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newMachineId } from '../src/core/index.js';
import { RESTORE_FLAGS } from '../src/drivers/gvisor/driver.js';
import { Runsc } from '../src/drivers/gvisor/runsc.js';
import { ociSpec, type SandboxPaths } from '../src/drivers/gvisor/spec.js';
import type { Berth as BerthClient } from '../src/sdk/index.js';
import { row, time, type Row } from './stats.js';

/** A small web-dev machine: a file, a script, a background server and a ticker, 16 MB of dirty memory. */
const RECIPE = {
  files: { '/srv/index.html': '<h1>template</h1>\n', '/usr/local/bin/hello': '#!/bin/sh\necho hello\n' },
  run: [
    'chmod 755 /usr/local/bin/hello',
    'cd /srv && setsid python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &',
    "setsid sh -c 'while :; do date > /tmp/tick; sleep 1; done' >/dev/null 2>&1 &",
    'head -c 16M /dev/urandom > /dev/shm/warm',
  ],
};

export async function benchTemplates(o: { berth: BerthClient; snapshotsDir: string; quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const N = o.quick ? 4 : 10;
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-tpl-'));
  const runsc = new Runsc({ binary: 'runsc', root: join(dir, 'runsc'), platform: 'ptrace' });
  const name = `bench-${process.pid}`;
  o.log('templates: build');
  const [buildMs, tpl] = await time(() => o.berth.templates.build(name, RECIPE));
  const img = join(o.snapshotsDir, tpl.snapshotId);
  const { version: _v, backend: _b, ...paths } = JSON.parse(await readFile(join(img, 'berth-image.json'), 'utf8')) as SandboxPaths & { version: number; backend: string };
  const berthMs: number[] = [];
  const rawMs: number[] = [];
  try {
    o.log(`templates: create from template vs raw restore, ${N} each, interleaved`);
    for (let i = 0; i < N; i++) {
      const [ms, s] = await time(() => o.berth.sessions.create({ template: name }));
      berthMs.push(ms);
      await s.terminate();
      const id = `rawtpl-${process.pid}-${i}`;
      const b = join(dir, id);
      await mkdir(b, { recursive: true });
      const spec = ociSpec({ sandboxId: id, limits: { memoryMb: tpl.settings.memoryMb, cpus: tpl.settings.cpus }, env: {}, identity: { hostname: id, machineId: newMachineId(), generation: 1, reason: 'fork' }, network: 'none', image: 'base' }, paths);
      await writeFile(join(b, 'config.json'), JSON.stringify(spec));
      rawMs.push((await time(() => runsc.run(['restore', '--detach', ...RESTORE_FLAGS, `--image-path=${img}`, `--bundle=${b}`, id])))[0]);
      await runsc.run(['kill', id, 'KILL'], { allowFail: true });
      await runsc.run(['delete', '--force', id], { allowFail: true });
    }
  } finally {
    for (const x of await runsc.list().catch(() => [])) await runsc.run(['delete', '--force', x.id], { allowFail: true });
    await o.berth.templates.delete(name).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
  return [
    { ...row('create from a template (16 MB dirty, 2 processes)', 'gvisor', berthMs, rawMs, '<= 1.3x raw restore'), note: `raw: runsc restore of the same image; build took ${Math.round(buildMs)} ms, image ${Math.round(tpl.sizeBytes / 1048576)} MB` },
  ];
}
