/**
 * An approval whose call the gate refuses at the moment the operator approves it (off-plan by then) ends
 * denied with that reason: it does not stay approved and run later when the agent repeats the call, even
 * after the plan would allow it again (issue 12 §4). Real engine, gate, Cedar and SQLite; memory driver.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

let t: TestEngine;
beforeEach(async () => {
  t = await createTestEngine();
});
afterEach(async () => {
  await t.close();
});

const POLICY = `
permit (principal, action == Action::"fs.read", resource);
@approval("required")
permit (principal, action == Action::"fs.write", resource);
`;

describe('an approved call refused when it runs', () => {
  it('ends denied with the refusal, is audited, and never runs later', async () => {
    const root = t.root;
    const { session, agentToken } = await t.engine.createSession(root, {});
    const agent = await t.engine.authenticate(agentToken);
    await t.engine.gate.setPolicy(root, POLICY, { tenantId: session.tenantId });
    await t.engine.gate.installTools(root, session.id, ['fs.read', 'fs.write']);
    const plan = (tools: string[]) => ({ objective: 'write a note', steps: tools.map((tool, i) => ({ id: `s${i}`, tool, repeatable: true, arguments: { type: 'object' } })) });
    await t.engine.gate.setPlan(root, session.id, plan(['fs.write']));

    const write = { tool: 'fs.write', args: { path: '/tmp/note', content: 'hello' } };
    const asked = await t.engine.gate.callTool(agent, session.id, write);
    expect(asked.decision).toBe('pending');
    const approvalId = (asked as { approvalId: string }).approvalId;

    // By the time the operator approves, the plan no longer has a write step.
    await t.engine.gate.setPlan(root, session.id, plan(['fs.read']));
    const decided = await t.engine.gate.approve(root, approvalId);
    expect(decided.status).toBe('denied');
    expect(decided.reason).toMatch(/refused when it ran/);
    expect(decided.result).toMatchObject({ decision: 'deny', stage: 'plan', code: 'off_plan' });
    const entries = (await t.engine.auditQuery(root, {})).filter((e) => e.action === 'approval.refused');
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ outcome: 'denied', data: { approvalId, code: 'off_plan' } });

    // The plan allows it again; the same call still does not run on the old approval.
    await t.engine.gate.setPlan(root, session.id, plan(['fs.write']));
    const again = await t.engine.gate.callTool(agent, session.id, write);
    expect(again.decision).toBe('deny');
    await expect(t.engine.statFile(root, session.id, '/tmp/note')).rejects.toMatchObject({ code: 'not_found' });
  });
});
