/**
 * `npm run bench [-- --json] [-- --quick] [-- --only gate,audit,startup,egress,gvisor,qemu,checkpoint,ports,templates,terminals,desktop]`: raw engines and Berth
 * side by side in one run (the default is gate,audit,gvisor,qemu; checkpoint compares runsc's checkpoint flags). Prints a table; with --json the last line is `{"results":[…]}`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createApp } from '../src/server/app.js';
import { createBerth, packageRoot } from '../src/server/compose.js';
import { startServer } from '../src/server/serve.js';
import { silentLogger } from '../src/server/log.js';
import { upgradeHandlers } from '../src/server/upgrades.js';
import { ensureRootfs } from '../src/drivers/image/rootfs.js';
import { Berth } from '../src/sdk/index.js';
import { benchAudit } from './audit.js';
import { benchGate } from './gate.js';
import { benchGvisor } from './gvisor.js';
import { printTable, row, type Row } from './stats.js';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help')) {
    console.log('npm run bench [-- --json] [-- --quick] [-- --only SECTIONS] [-- --audit-entries N]\n' +
      '  --json    end with one JSON line {"results":[…]}\n  --quick   fewer samples\n' +
      '  --audit-entries N  the audit section builds a log of N entries for its checkpoint, proof and verify rows\n' +
      '            (default 1000000, with --quick 100000; 0 skips them)\n' +
      '  --only    sections, comma-separated: gate, audit, startup, egress, gvisor, templates, desktop, qemu (the default set),\n' +
      '            and ports, terminals, checkpoint (runsc checkpoint flags vs none)');
    return;
  }
  const json = args.includes('--json');
  const quick = args.includes('--quick');
  const onlyArg = args.find((a) => a.startsWith('--only='))?.slice(7) ?? (args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined);
  const entriesArg = args.includes('--audit-entries') ? Number(args[args.indexOf('--audit-entries') + 1]) : quick ? 100_000 : 1_000_000;
  if (!Number.isSafeInteger(entriesArg) || entriesArg < 0) {
    console.error('bench: --audit-entries must be a whole number of entries (0 skips the big-log rows)');
    process.exitCode = 2;
    return;
  }
  const only = new Set((onlyArg ?? 'gate,audit,startup,egress,gvisor,templates,desktop,qemu').split(','));
  const log = (s: string) => console.error(`[bench] ${s}`);
  const root = packageRoot();
  const cacheDir = join(root, '.berth', 'images');
  const rows: Row[] = [];
  log(`host: ${availableParallelism()} cores, load ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);

  if (only.has('gate')) {
    log('gate: evaluate() without the executor');
    for (const g of await benchGate()) {
      rows.push({ ...row(g.op, 'gate', [g.p50Ms], null, 'p99 <= 2 ms'), n: g.n, berthP95Ms: g.p99Ms, note: `p99 ${g.p99Ms} ms` });
    }
  }

  if (only.has('startup')) {
    rows.push(...(await (await import('./startup.js')).benchStartup({ quick, log })));
  }

  if (only.has('egress')) {
    log('egress: connection setup through the gate and download through the proxy, vs direct');
    rows.push(...(await (await import('./egress.js')).benchEgress({ quick, log })));
  }

  if (only.has('checkpoint')) {
    const { benchCheckpointFlags } = await import('./gvisor-checkpoint.js');
    const rootfs = await ensureRootfs({ cacheDir });
    rows.push(...(await benchCheckpointFlags({ rootfs, agentDir: join(root, 'dist', 'agent'), quick, log })));
  }

  if (only.has('audit')) {
    log(`audit: append with tree + signed head, gated call (memory driver)${entriesArg ? `, checkpoint, proofs and verify at ${entriesArg} entries` : ''}`);
    rows.push(...(await benchAudit({ log, ...(entriesArg ? { entries: entriesArg } : {}) })));
  }

  if (only.has('ports')) {
    // Ports (issue 9 §3): their own server, with the upgrade handler the tunnel needs.
    const { benchPorts } = await import('./ports.js');
    const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-ports-'));
    const side = await createBerth({ dataDir, imageCacheDir: cacheDir, backends: ['gvisor'], idleSweepMs: 0, log });
    const http = await startServer({ app: createApp({ engine: side.engine }), port: 0, upgrades: { handlers: upgradeHandlers(side.engine, silentLogger) } });
    try {
      rows.push(...(await benchPorts({ berth: new Berth({ url: http.url, token: side.rootKey }), token: side.rootKey, quick, log })));
    } finally {
      await http.close();
      await side.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  }

  if (only.has('gvisor') || only.has('qemu') || only.has('templates') || only.has('terminals') || only.has('desktop')) {
    const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-'));
    const backends = [...(only.has('gvisor') || only.has('templates') || only.has('terminals') || only.has('desktop') ? ['gvisor' as const] : []), ...(only.has('qemu') ? ['qemu' as const] : [])];
    const side = await createBerth({ dataDir, imageCacheDir: cacheDir, backends, idleSweepMs: 0, log });
    const http = await startServer({ app: createApp({ engine: side.engine }), port: 0, upgrades: { handlers: upgradeHandlers(side.engine, silentLogger) } });
    const berth = new Berth({ url: http.url, token: side.rootKey });
    try {
      if (only.has('gvisor') && side.engine.health().backends.gvisor?.available) {
        const rootfs = await ensureRootfs({ cacheDir });
        rows.push(...(await benchGvisor({ berth, rootfs, agentDir: dirname(join(root, 'dist', 'agent', 'berth-agent')), quick, snapshotsDir: join(dataDir, 'snapshots'), log })));
        rows.push(...(await (await import('./processes.js')).benchProcesses({ berth, quick, log })));
      }
      // templates (issue 8 §4): create from a template vs a raw runsc restore of the same image
      if (only.has('templates') && side.engine.health().backends.gvisor?.available) {
        const { benchTemplates } = await import('./templates.js');
        rows.push(...(await benchTemplates({ berth, snapshotsDir: join(dataDir, 'snapshots'), quick, log })));
      }
      // terminals (issue 9 §2): keystroke echo through the WebSocket vs runsc exec cat
      if ((only.has('gvisor') || only.has('terminals')) && side.engine.health().backends.gvisor?.available) {
        rows.push(...(await (await import('./terminals.js')).benchTerminals({ berth, dataDir, quick, log })));
      }
      // desktops (issue 11): create → first screenshot, screenshot and click round trips, idle memory
      if (only.has('desktop') && side.engine.health().backends.gvisor?.available) {
        rows.push(...(await (await import('./desktop.js')).benchDesktop({ berth, dataDir, quick, log })));
      }
      if (only.has('qemu')) {
        const { benchQemuRows } = await import('./qemu.js');
        rows.push(...(await benchQemuRows({ cacheDir, quick, log })));
      }
    } finally {
      await http.close();
      await side.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  }

  printTable(rows);
  if (json) console.log(JSON.stringify({ results: rows }));
}

main().catch((e: unknown) => {
  console.error(`bench failed: ${(e as Error).stack ?? String(e)}`);
  process.exit(1);
});
