import type { TenantDetailView } from '../protocol/quotas.js';
import { SPEC } from './commands.js';
import { commandUsage } from './usage.js';
import { UsageError, parseCommand, printJson, println, table, type Io, type VerbContext } from './common.js';

function printDetail(io: Io, t: TenantDetailView): void {
  const q = t.quotas;
  const u = t.usage;
  println(io, `${t.id} ${t.name}`);
  println(
    io,
    table([
      ['QUOTA', 'LIMIT', 'USED'],
      ['sessions', String(q.maxSessions), String(u.sessions)],
      ['memory MiB', String(q.maxMemoryMb), String(u.memoryMb)],
      ['snapshots GiB', String(q.maxSnapshotGb), String(u.snapshotGb)],
      ['egress GiB', String(q.maxEgressGb), String(u.egressGb)],
    ]),
  );
}


export async function run(ctx: VerbContext): Promise<number> {
  if (ctx.sub === 'create') {
    const { values: v, positionals } = parseCommand('tenant', 'create', ctx.argv);
    const t = await ctx.client().tenants.create(positionals[0]!);
    if (v.json) printJson(ctx.io, t);
    else {
      println(ctx.io, `${t.id} ${t.name}`);
      println(ctx.io, `api key (shown once): ${t.apiKey}`);
    }
    return 0;
  }
  if (ctx.sub === 'show') {
    const { values: v, positionals } = parseCommand('tenant', 'show', ctx.argv);
    const t = await ctx.client().tenants.get(positionals[0]!);
    if (v.json) printJson(ctx.io, t);
    else printDetail(ctx.io, t);
    return 0;
  }
  if (ctx.sub === 'set') {
    const { values: v, positionals } = parseCommand('tenant', 'set', ctx.argv);
    const quotas = {
      ...(v['max-sessions'] !== undefined ? { maxSessions: v['max-sessions'] } : {}),
      ...(v['max-memory-mb'] !== undefined ? { maxMemoryMb: v['max-memory-mb'] } : {}),
      ...(v['max-snapshot-gb'] !== undefined ? { maxSnapshotGb: v['max-snapshot-gb'] } : {}),
      ...(v['max-egress-gb'] !== undefined ? { maxEgressGb: v['max-egress-gb'] } : {}),
    };
    if (Object.keys(quotas).length === 0) throw new UsageError('tenant set: give at least one of --max-sessions, --max-memory-mb, --max-snapshot-gb, --max-egress-gb', commandUsage('tenant', 'set', SPEC.tenant.commands.set));
    const t = await ctx.client().tenants.setQuotas(positionals[0]!, quotas);
    if (v.json) printJson(ctx.io, t);
    else printDetail(ctx.io, t);
    return 0;
  }
  {
    const { values: v } = parseCommand('tenant', 'list', ctx.argv);
    const list = await ctx.client().tenants.list();
    if (v.json) printJson(ctx.io, { tenants: list });
    else if (list.length === 0) println(ctx.io, 'no tenants');
    else println(ctx.io, table([['ID', 'NAME', 'CREATED'], ...list.map((t) => [t.id, t.name, t.createdAt])]));
    return 0;
  }
}
