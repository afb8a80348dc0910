import type { ApprovalStatus, ApprovalView } from '../sdk/index.js';
import { parseCommand, printJson, println, table, type VerbContext } from './common.js';

function show(ctx: VerbContext, a: ApprovalView, json: boolean | undefined): void {
  if (json) printJson(ctx.io, a);
  else {
    println(ctx.io, `${a.id} ${a.status}${a.decidedBy ? ` by ${a.decidedBy}` : ''}`);
    if (a.result) println(ctx.io, JSON.stringify(a.result));
  }
}

/** `berth approvals list`. */
export async function list(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('approvals', 'list', ctx.argv);
  const states = v.state ? (v.state.split(',').filter(Boolean) as ApprovalStatus[]) : undefined;
  const approvals = await ctx.client().approvals.list({ states, sessionId: v.session });
  if (v.json) printJson(ctx.io, { approvals });
  else if (approvals.length === 0) println(ctx.io, 'no approvals');
  else {
    const rows = [['ID', 'STATUS', 'SESSION', 'TOOL', 'CREATED', 'EXPIRES']];
    for (const a of approvals) rows.push([a.id, a.status, a.sessionId, a.tool, a.createdAt, a.expiresAt ?? '-']);
    println(ctx.io, table(rows));
  }
  return 0;
}

/** `berth approve ID`: approves and runs the parked call; prints the approval with the call's result. */
export async function approve(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('approve', '', ctx.argv);
  show(ctx, await ctx.client().approvals.approve(positionals[0]!), v.json);
  return 0;
}

/** `berth deny ID --reason TEXT`. */
export async function deny(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('deny', '', ctx.argv);
  show(ctx, await ctx.client().approvals.deny(positionals[0]!, v.reason!), v.json);
  return 0;
}
