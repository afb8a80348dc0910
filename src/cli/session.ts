import type { SessionView } from '../protocol/types.js';
import type { BackendName } from '../core/sandbox.js';
import { UsageError, kvFlags, numberFlag, parse, printJson, println, table, type VerbContext } from './common.js';

const USAGE = `berth session create [--objective TEXT] [--memory MB] [--cpus N] [--idle-timeout S] [--env K=V]… [--meta K=V]… [--backend gvisor|qemu] [--tenant ID] [--json]
       berth session list [--state S[,S…]] [--json]
       berth session show ID [--json]
       berth session rm ID [--json]`;

export async function run(ctx: VerbContext): Promise<number> {
  const [sub, ...argv] = ctx.argv;
  switch (sub) {
    case 'create':
      return create(ctx, argv);
    case 'list':
    case 'ls':
      return list(ctx, argv);
    case 'show':
    case 'get':
      return show(ctx, argv);
    case 'rm':
    case 'terminate':
      return rm(ctx, argv);
    default:
      throw new UsageError(sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'missing subcommand', USAGE);
  }
}

async function create(ctx: VerbContext, argv: string[]): Promise<number> {
  const { values: v } = parse(
    argv,
    {
      objective: { type: 'string' },
      memory: { type: 'string' },
      cpus: { type: 'string' },
      'idle-timeout': { type: 'string' },
      env: { type: 'string', multiple: true },
      meta: { type: 'string', multiple: true },
      backend: { type: 'string' },
      tenant: { type: 'string' },
      json: { type: 'boolean' },
    },
    USAGE,
    { max: 0 },
  );
  if (v.backend !== undefined && v.backend !== 'gvisor' && v.backend !== 'qemu') {
    throw new UsageError(`--backend: must be gvisor or qemu, got ${JSON.stringify(v.backend)}`, USAGE);
  }
  const s = await ctx.client().sessions.create({
    objective: v.objective,
    memoryMb: numberFlag('memory', v.memory, USAGE, true),
    cpus: numberFlag('cpus', v.cpus, USAGE),
    idleTimeoutS: numberFlag('idle-timeout', v['idle-timeout'], USAGE, true),
    env: kvFlags('env', v.env, USAGE),
    metadata: kvFlags('meta', v.meta, USAGE),
    backend: v.backend as BackendName | undefined,
    tenantId: v.tenant,
  });
  if (v.json) printJson(ctx.io, s.toJSON());
  else {
    println(ctx.io, `${s.id} ${s.info.state} (${s.info.backend}, ${s.info.settings.memoryMb} MiB, ${s.info.settings.cpus} cpu)`);
    println(ctx.io, `agent token (shown once): ${s.agentToken}`);
  }
  return 0;
}

async function list(ctx: VerbContext, argv: string[]): Promise<number> {
  const { values: v } = parse(argv, { state: { type: 'string' }, json: { type: 'boolean' } }, USAGE, { max: 0 });
  const states = v.state ? (v.state.split(',').filter(Boolean) as SessionView['state'][]) : undefined;
  const sessions = await ctx.client().sessions.list({ states });
  if (v.json) printJson(ctx.io, { sessions: sessions.map((s) => s.info) });
  else if (sessions.length === 0) println(ctx.io, 'no sessions');
  else {
    const rows = [['ID', 'STATE', 'BACKEND', 'CREATED', 'OBJECTIVE']];
    for (const s of sessions) rows.push([s.id, s.info.state, s.info.backend, s.info.createdAt, s.info.objective ?? '']);
    println(ctx.io, table(rows));
  }
  return 0;
}

async function show(ctx: VerbContext, argv: string[]): Promise<number> {
  const { values: v, positionals } = parse(argv, { json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
  const s = await ctx.client().sessions.get(positionals[0]!);
  if (v.json) {
    printJson(ctx.io, s.info);
    return 0;
  }
  const i = s.info;
  const m = i.metering;
  const rows = [
    ['id', i.id],
    ['state', `${i.state} since ${i.stateSince}${i.failureReason ? ` (${i.failureReason})` : ''}`],
    ['backend', i.backend],
    ['tenant', i.tenantId],
    ['objective', i.objective ?? '-'],
    ['resources', `${i.settings.memoryMb} MiB, ${i.settings.cpus} cpu, idle timeout ${i.settings.idleTimeoutS ? `${i.settings.idleTimeoutS} s` : 'off'}`],
    ['created', i.createdAt],
    ['last activity', i.lastActivityAt],
    ['metering', `${m.execCount} execs, ${m.cpuSeconds} cpu s, peak ${m.peakMemoryBytes} B, in ${m.bytesIn} B, out ${m.bytesOut} B`],
    ['state seconds', Object.entries(m.stateSeconds).map(([k, n]) => `${k}=${n}`).join(' ') || '-'],
  ];
  if (i.parentSnapshotId) rows.push(['forked from', i.parentSnapshotId]);
  println(ctx.io, table(rows.map(([k, val]) => [`${k}:`, val ?? ''])));
  return 0;
}

async function rm(ctx: VerbContext, argv: string[]): Promise<number> {
  const { values: v, positionals } = parse(argv, { json: { type: 'boolean' } }, USAGE, { min: 1, max: 1 });
  const id = positionals[0]!;
  const client = ctx.client();
  const s = await client.sessions.get(id);
  await s.terminate();
  if (v.json) printJson(ctx.io, { id, state: 'terminated' });
  else println(ctx.io, `${id} terminated`);
  return 0;
}
