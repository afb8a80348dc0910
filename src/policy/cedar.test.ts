import { describe, expect, it } from 'vitest';
import { AppError, isAppError } from '../core/index.js';
import { BUILTIN_TOOLS, builtinTool } from './builtin-tools.js';
import { PolicyEngine, type AuthorizeRequest } from './cedar.js';
import { DEFAULT_POLICY_TEXT } from './default-policy.js';
import { defineTool } from './tools.js';

function req(tool: string, args: Record<string, unknown>, over: Partial<AuthorizeRequest> = {}): AuthorizeRequest {
  const t = builtinTool(tool);
  return {
    sessionId: 'ses_1',
    tenantId: 'ten_1',
    metadata: { team: 'core' },
    tool,
    risk: t?.risk ?? 'write',
    args,
    hourUtc: 12,
    callsInSession: 0,
    ...over,
  };
}

function compileError(text: string, tools = BUILTIN_TOOLS): AppError {
  try {
    PolicyEngine.compile(text, { tools });
  } catch (e) {
    if (isAppError(e)) return e;
    throw e;
  }
  throw new Error('policy compiled');
}

describe('default policy', () => {
  const engine = PolicyEngine.compile(DEFAULT_POLICY_TEXT);

  it('permits read and write tools', () => {
    expect(engine.authorize(req('fs.read', { path: '/etc/hosts' })).decision).toBe('allow');
    expect(engine.authorize(req('fs.list', { path: '/' })).decision).toBe('allow');
    expect(engine.authorize(req('fs.write', { path: '/work/a', content: 'x' })).decision).toBe('allow');
    const r = engine.authorize(req('shell.exec', { command: 'ls -la' }));
    expect(r).toMatchObject({ decision: 'allow', approvalRequired: false });
  });

  it('forbids destructive commands and system writes', () => {
    for (const command of ['rm -rf /', 'cd / && rm -rf /*', 'rm -rf --no-preserve-root /', 'mkfs.ext4 /dev/vda', 'dd if=/dev/zero of=/dev/vda']) {
      const r = engine.authorize(req('shell.exec', { command }));
      expect(r.decision, command).toBe('deny');
      expect(r.reasons).toEqual(['forbid-destructive-shell']);
    }
    expect(engine.authorize(req('shell.exec', { command: 'rm -rf /work/build' })).decision).toBe('allow');
    expect(engine.authorize(req('fs.write', { path: '/proc/1/mem', content: 'x' })).reasons).toEqual(['forbid-system-writes']);
  });

  it('routes unsafe HTTP methods to approval', () => {
    expect(engine.authorize(req('http.request', { method: 'GET', url: 'https://a.example' }))).toMatchObject({ decision: 'allow', approvalRequired: false });
    expect(engine.authorize(req('http.request', { method: 'POST', url: 'https://a.example' }))).toMatchObject({
      decision: 'allow',
      approvalRequired: true,
      reasons: ['approve-http-unsafe-methods'],
    });
  });

  it('routes irreversible operator tools to approval', () => {
    const deploy = defineTool({
      name: 'acme.deploy',
      description: 'Deploys',
      risk: 'irreversible',
      executor: { kind: 'command', argv: ['deploy'] },
      inputSchema: { type: 'object', properties: { target: { type: 'string' } }, required: ['target'] },
      outputSchema: { type: 'object' },
    });
    const e = PolicyEngine.compile(DEFAULT_POLICY_TEXT, { tools: [...BUILTIN_TOOLS, deploy] });
    expect(e.authorize(req('acme.deploy', { target: 'prod' }, { risk: 'irreversible' }))).toMatchObject({ decision: 'allow', approvalRequired: true });
  });
});

describe('Cedar semantics', () => {
  it('denies by default', () => {
    const e = PolicyEngine.compile('');
    const r = e.authorize(req('fs.read', { path: '/a' }));
    expect(r.decision).toBe('deny');
    expect(r.reasons).toEqual([]);
  });

  it('lets forbid win over permit', () => {
    const e = PolicyEngine.compile(`
      permit (principal, action, resource);
      @id("no-secrets") @reason("secrets are off limits")
      forbid (principal, action == Action::"fs.read", resource) when { context.args.path like "/secrets/*" };
    `);
    expect(e.authorize(req('fs.read', { path: '/work/a' })).decision).toBe('allow');
    const r = e.authorize(req('fs.read', { path: '/secrets/key' }));
    expect(r).toMatchObject({ decision: 'deny', reasons: ['no-secrets'] });
    expect(e.policy('no-secrets')?.annotations.reason).toBe('secrets are off limits');
  });

  it('requires approval when any determining permit asks for it', () => {
    const e = PolicyEngine.compile(`
      @id("all") permit (principal, action, resource);
      @id("careful") @approval("required") permit (principal, action == Action::"fs.write", resource);
    `);
    expect(e.authorize(req('fs.read', { path: '/a' }))).toMatchObject({ decision: 'allow', approvalRequired: false });
    const r = e.authorize(req('fs.write', { path: '/a', content: 'x' }));
    expect(r.decision).toBe('allow');
    expect(r.approvalRequired).toBe(true);
    expect(r.reasons.sort()).toEqual(['all', 'careful']);
  });

  it('sees session metadata, tenant, plan step, hour and call count', () => {
    const e = PolicyEngine.compile(`
      @id("m") permit (principal, action == Action::"fs.read", resource)
        when { principal.metadata.hasTag("team") && principal.metadata.getTag("team") == "core" && principal.tenant == "ten_1" };
      @id("p") permit (principal, action == Action::"fs.list", resource) when { context has planStep && context.planStep == "look" };
      @id("h") forbid (principal, action, resource) when { context.hourUtc < 6 || context.callsInSession >= 100 };
    `);
    expect(e.authorize(req('fs.read', { path: '/a' })).decision).toBe('allow');
    expect(e.authorize(req('fs.read', { path: '/a' }, { metadata: { team: 'ops' } })).decision).toBe('deny');
    expect(e.authorize(req('fs.read', { path: '/a' }, { metadata: {} })).decision).toBe('deny');
    expect(e.authorize(req('fs.list', { path: '/' })).decision).toBe('deny');
    expect(e.authorize(req('fs.list', { path: '/' }, { planStep: 'look' })).decision).toBe('allow');
    expect(e.authorize(req('fs.read', { path: '/a' }, { hourUtc: 3 })).decision).toBe('deny');
    expect(e.authorize(req('fs.read', { path: '/a' }, { callsInSession: 100 })).decision).toBe('deny');
  });

  it('fails closed when a forbid cannot be evaluated', () => {
    const e = PolicyEngine.compile(`
      permit (principal, action, resource);
      @id("overflow") forbid (principal, action == Action::"shell.exec", resource)
        when { context.args has timeoutMs && context.args.timeoutMs * 1000000000000 > 0 };
    `);
    expect(e.authorize(req('shell.exec', { command: 'ls', timeoutMs: 1 })).decision).toBe('deny');
    const r = e.authorize(req('shell.exec', { command: 'ls', timeoutMs: 86400000 }));
    expect(r.decision).toBe('deny');
    expect(r.reasons).toEqual(['overflow']);
    expect(r.erroredPolicies).toEqual(['overflow']);
    expect(e.authorize(req('shell.exec', { command: 'ls' })).decision).toBe('allow');
  });

  it('maps positional ids to the right policies beyond ten rules', () => {
    let text = '';
    for (let i = 0; i < 12; i++) {
      text +=
        i === 10
          ? `@reason("rule ten") forbid (principal, action == Action::"fs.read", resource) when { context.args.path == "/ten" };\n`
          : `permit (principal, action == Action::"fs.read", resource) when { context.args.path == "/p${i}" };\n`;
    }
    const e = PolicyEngine.compile(text);
    expect(e.policies.map((p) => p.id)).toEqual(Array.from({ length: 12 }, (_, i) => `policy${i}`));
    expect(e.policy('policy10')).toMatchObject({ effect: 'forbid', line: 11, annotations: { reason: 'rule ten' } });
    expect(e.authorize(req('fs.read', { path: '/ten' })).reasons).toEqual(['policy10']);
    expect(e.authorize(req('fs.read', { path: '/p2' })).reasons).toEqual(['policy2']);
  });

  it('slices policies by action scope without changing decisions', () => {
    const e = PolicyEngine.compile(`
      @id("reads") permit (principal, action in Action::"read", resource);
      @id("list") permit (principal, action in [Action::"shell.exec", Action::"fs.write"], resource);
      @id("group-eq") forbid (principal, action == Action::"write", resource);
      @id("all-forbid") forbid (principal, action, resource) when { context.risk == "write" && context.callsInSession > 5 };
    `);
    expect(e.authorize(req('fs.read', { path: '/a' })).reasons).toEqual(['reads']);
    expect(e.authorize(req('shell.exec', { command: 'ls' })).reasons).toEqual(['list']);
    expect(e.authorize(req('fs.write', { path: '/a', content: '' })).decision).toBe('allow');
    expect(e.authorize(req('fs.write', { path: '/a', content: '' }, { callsInSession: 6 })).reasons).toEqual(['all-forbid']);
    expect(e.authorize(req('http.request', { method: 'GET', url: 'https://x' })).decision).toBe('deny');
  });

  it('refuses calls for tools it was not compiled for, or whose risk changed', () => {
    const e = PolicyEngine.compile('permit (principal, action, resource);');
    expect(e.authorize(req('acme.other', {})).decision).toBe('deny');
    expect(e.authorize(req('fs.read', { path: '/a' }, { risk: 'write' })).decision).toBe('deny');
  });
});

describe('bad policies', () => {
  it('rejects text that does not parse, with a line number', () => {
    const err = compileError('permit (principal, action, resource);\nforbid (principal, action, resource) when { context. };');
    expect(err.code).toBe('invalid_argument');
    const errors = err.details?.errors as string[];
    expect(errors.length).toBeGreaterThan(0);
    expect(errors[0]).toMatch(/^line 2:/);
  });

  it('rejects policies that do not validate against the schema', () => {
    expect(compileError('permit (principal, action == Action::"fs.read", resource) when { context.args.command == "x" };').code).toBe('invalid_argument');
    expect(compileError('permit (principal, action == Action::"no.such.tool", resource);').code).toBe('invalid_argument');
    expect(compileError('permit (principal, action, resource) when { principal.metadata.getTag("team") == "x" };').code).toBe('invalid_argument');
    expect(compileError('permit (principal, action, resource) when { principal.owner == "x" };').code).toBe('invalid_argument');
  });

  it('rejects templates and misused annotations', () => {
    expect(compileError('permit (principal == ?principal, action, resource);').code).toBe('invalid_argument');
    expect(compileError('@approval("maybe") permit (principal, action, resource);').code).toBe('invalid_argument');
    expect(compileError('@approval("required") forbid (principal, action, resource);').code).toBe('invalid_argument');
    expect(compileError('@id("a") permit (principal, action, resource);\n@id("a") forbid (principal, action, resource);').code).toBe('invalid_argument');
  });

  it('keeps the previous engine usable when a new policy is rejected', () => {
    const current = PolicyEngine.compile('permit (principal, action in Action::"read", resource);');
    expect(() => PolicyEngine.compile('permit (principal, action, resource')).toThrow();
    expect(current.authorize(req('fs.read', { path: '/a' })).decision).toBe('allow');
  });

  it('a policy about an operator tool needs the tool in the tool set', () => {
    const tool = defineTool({
      name: 'acme.report',
      description: 'Makes a report',
      risk: 'read',
      executor: { kind: 'command', argv: ['report'] },
      inputSchema: { type: 'object', properties: { format: { type: 'string' }, pages: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' } } } },
      outputSchema: { type: 'object' },
    });
    const text = 'permit (principal, action == Action::"acme.report", resource) when { context.args has tags && context.args.tags.contains("q3") };';
    expect(compileError(text).code).toBe('invalid_argument');
    const e = PolicyEngine.compile(text, { tools: [...BUILTIN_TOOLS, tool] });
    expect(e.authorize(req('acme.report', { tags: ['q3'], pages: 2 }, { risk: 'read' })).decision).toBe('allow');
    expect(e.authorize(req('acme.report', { tags: ['q4'] }, { risk: 'read' })).decision).toBe('deny');
    // an integer beyond 2^53 cannot be shown to Cedar: refused, not ignored
    expect(e.authorize(req('acme.report', { tags: ['q3'], pages: 2 ** 60 }, { risk: 'read' })).decision).toBe('deny');
  });
});
