import type { BackendName } from '../core/sandbox.js';
import type { SessionView } from '../protocol/types.js';
import { SPEC } from './commands.js';
import { UsageError, parseCommand, printJson, println, table, type VerbContext } from './common.js';
import { commandUsage } from './usage.js';

export async function run(ctx: VerbContext): Promise<number> {
  switch (ctx.sub) {
    case 'create':
      return create(ctx);
    case 'list':
      return list(ctx);
    case 'show':
      return show(ctx);
    default:
      return rm(ctx);
  }
}

async function create(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('session', 'create', ctx.argv);
  const s = await ctx.client().sessions.create({
    objective: v.objective,
    memoryMb: v.memory,
    diskMb: v.disk,
    cpus: v.cpus,
    idleTimeoutS: v['idle-timeout'],
    env: v.env,
    metadata: v.meta,
    backend: v.backend as BackendName | undefined,
    tenantId: v.tenant,
    template: v.template,
    egressAllow: splitList(v['egress-allow']),
    egressAllowCidr: splitList(v['egress-allow-cidr']),
    desktop: desktopFlag(v.desktop, v.screen),
  });
  if (v.json) printJson(ctx.io, s.toJSON());
  else {
    const disk = s.info.settings.diskMb === null ? '' : `, ${s.info.settings.diskMb} MiB for files`;
    println(ctx.io, `${s.id} ${s.info.state} (${s.info.backend}, ${s.info.settings.memoryMb} MiB${disk}, ${s.info.settings.cpus} cpu)`);
    println(ctx.io, `agent token (shown once): ${s.agentToken}`);
  }
  return 0;
}

async function list(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('session', 'list', ctx.argv);
  const states = v.state ? (v.state.split(',').filter(Boolean) as SessionView['state'][]) : undefined;
  const page = await ctx.client().sessions.page({ states, metadata: v.metadata, limit: v.limit, after: v.after });
  if (v.json) printJson(ctx.io, { sessions: page.sessions.map((s) => s.info), nextCursor: page.nextCursor });
  else if (page.sessions.length === 0) println(ctx.io, 'no sessions');
  else {
    const rows = [['ID', 'STATE', 'BACKEND', 'CREATED', 'OBJECTIVE', 'METADATA']];
    for (const s of page.sessions) rows.push([s.id, s.info.state, s.info.backend, s.info.createdAt, s.info.objective ?? '', metaText(s.info.metadata)]);
    println(ctx.io, table(rows));
    if (page.nextCursor) println(ctx.io, `more: berth session list --after ${page.nextCursor}${v.limit ? ` --limit ${v.limit}` : ''}`);
  }
  return 0;
}

const metaText = (m: Record<string, string>) => Object.entries(m).map(([k, val]) => `${k}=${val}`).join(' ');

async function show(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('session', 'show', ctx.argv);
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
    ['metadata', metaText(i.metadata) || '-'],
    ['resources', `${i.settings.memoryMb} MiB${i.settings.diskMb === null ? '' : ` (${i.settings.diskMb} MiB for files)`}, ${i.settings.cpus} cpu, idle timeout ${i.settings.idleTimeoutS ? `${i.settings.idleTimeoutS} s` : 'off'}`],
    ['created', i.createdAt],
    ['last activity', i.lastActivityAt],
    ['metering', `${m.execCount} execs, ${m.cpuSeconds} cpu s, peak ${m.peakMemoryBytes} B, in ${m.bytesIn} B, out ${m.bytesOut} B`],
    ['state seconds', Object.entries(m.stateSeconds).map(([k, n]) => `${k}=${n}`).join(' ') || '-'],
  ];
  if (i.parentSnapshotId) rows.push(['forked from', i.parentSnapshotId]);
  println(ctx.io, table(rows.map(([k, val]) => [`${k}:`, val ?? ''])));
  return 0;
}

async function rm(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('session', 'rm', ctx.argv);
  const id = positionals[0]!;
  const s = await ctx.client().sessions.get(id);
  await s.terminate();
  if (v.json) printJson(ctx.io, { id, state: 'terminated' });
  else println(ctx.io, `${id} terminated`);
  return 0;
}

/** --desktop and --screen WxH; a malformed size is a usage error naming the flag. */
function desktopFlag(desktop: boolean | undefined, screen: string | undefined): boolean | { width: number; height: number } | undefined {
  if (screen === undefined) return desktop || undefined;
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(screen);
  if (!m) throw new UsageError(`--screen: expected WIDTHxHEIGHT in pixels (e.g. 1280x800), got ${JSON.stringify(screen)}`, commandUsage('session', 'create', SPEC.session.commands.create));
  return { width: Number(m[1]), height: Number(m[2]) };
}

/** A repeatable list flag that also takes commas; undefined when not given. */
function splitList(v: string[] | undefined): string[] | undefined {
  return v ? v.flatMap((h) => h.split(',')).filter(Boolean) : undefined;
}
