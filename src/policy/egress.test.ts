import { describe, expect, it } from 'vitest';
import { PolicyEngine } from './cedar.js';
import { DEFAULT_POLICY_TEXT } from './default-policy.js';
import { checkAddresses, evaluateConnect, matchEgressAllow, normalizeEgressAllow, normalizeEgressCidrs, parseIp, restrictedRange } from './egress.js';

const session = { id: 'session_x', tenantId: 'tenant_default', metadata: {}, callsInSession: 0 };
const base = DEFAULT_POLICY_TEXT;

describe('egress allow-list', () => {
  it('matches exact hosts (80 and 443 unless a port is named), *.suffix, IP literals and CIDRs', () => {
    const allow = normalizeEgressAllow(['pypi.org', '*.github.com', 'api.test:8443', '10.1.2.3', '[::1]:9', '192.168.7.0/24']);
    expect(matchEgressAllow('pypi.org', 443, allow)).toBe('pypi.org');
    expect(matchEgressAllow('PyPI.org.', 80, allow)).toBe('pypi.org');
    expect(matchEgressAllow('pypi.org', 22, allow)).toBeNull();
    expect(matchEgressAllow('evil-pypi.org', 443, allow)).toBeNull();
    expect(matchEgressAllow('pypi.org.evil.net', 443, allow)).toBeNull();
    expect(matchEgressAllow('codeload.github.com', 443, allow)).toBe('*.github.com');
    expect(matchEgressAllow('github.com', 443, allow)).toBeNull();
    expect(matchEgressAllow('xgithub.com', 443, allow)).toBeNull();
    expect(matchEgressAllow('api.test', 8443, allow)).toBe('api.test:8443');
    expect(matchEgressAllow('api.test', 443, allow)).toBeNull();
    expect(matchEgressAllow('10.1.2.3', 80, allow)).toBe('10.1.2.3');
    expect(matchEgressAllow('::1', 9, allow)).toBe('[::1]:9');
    expect(matchEgressAllow('192.168.7.200', 5432, allow)).toBe('192.168.7.0/24');
    expect(matchEgressAllow('192.168.8.1', 80, allow)).toBeNull();
    expect(matchEgressAllow('pypi.org', 443, [])).toBeNull();
  });

  it('refuses what is not a host, wildcard, IP or CIDR, naming the field', () => {
    expect(normalizeEgressAllow([' PyPI.org ', 'pypi.org'])).toEqual(['pypi.org']);
    for (const bad of ['http://x.com', 'x.com/path', 'a b', 'x.com:0', 'x.com:70000', '*', '*.', '', '::1', '10.0.0.0/33', 'x.com:', 'a..b']) {
      expect(() => normalizeEgressAllow([bad]), bad).toThrow(expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field: 'egressAllow' }) }));
    }
    expect(normalizeEgressCidrs(['127.0.0.0/8', 'FC00::/7'])).toEqual(['127.0.0.0/8', 'fc00::/7']);
    for (const bad of ['127.0.0.1', 'x.com', '1.2.3.4/40', '::/129']) {
      expect(() => normalizeEgressCidrs([bad]), bad).toThrow(expect.objectContaining({ code: 'invalid_argument', details: expect.objectContaining({ field: 'egressAllowCidr' }) }));
    }
  });
});

describe('address ranges', () => {
  it('knows every restricted range, IPv4-mapped IPv6 included', () => {
    const restricted = ['127.0.0.1', '127.255.0.9', '0.0.0.0', '10.9.9.9', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '::1', '::', 'fd00:ec2::254', 'fe80::1', '::ffff:127.0.0.1', '::ffff:7f00:1'];
    for (const a of restricted) expect(restrictedRange(parseIp(a)!), a).not.toBeNull();
    for (const a of ['1.1.1.1', '172.32.0.1', '8.8.8.8', '2606:4700::1111', '192.169.0.1']) expect(restrictedRange(parseIp(a)!), a).toBeNull();
  });

  it('connects only to an address outside the restricted ranges, or inside an operator CIDR', () => {
    const args = { sessionId: 's', host: 'h.test', port: 80 };
    expect(checkAddresses({ ...args, addresses: ['127.0.0.1'], cidrs: [] })).toMatchObject({ ok: false, range: '127.0.0.0/8', reason: expect.stringContaining('--egress-allow-cidr 127.0.0.0/8') });
    expect(checkAddresses({ ...args, addresses: ['10.0.0.1', '93.184.216.34'], cidrs: [] })).toEqual({ ok: true, address: '93.184.216.34', family: 4 });
    expect(checkAddresses({ ...args, addresses: ['127.0.0.1'], cidrs: ['127.0.0.0/8'] })).toEqual({ ok: true, address: '127.0.0.1', family: 4 });
    expect(checkAddresses({ ...args, addresses: ['::ffff:169.254.169.254'], cidrs: ['127.0.0.0/8'] })).toMatchObject({ ok: false });
    expect(checkAddresses({ ...args, addresses: [], cidrs: [] })).toMatchObject({ ok: false });
  });
});

describe('evaluateConnect', () => {
  const rules = { allow: ['pypi.org', '127.0.0.1:8080'], cidrs: [] };
  it('refuses a host off the list before policy runs, naming the host, the rule and the fix', () => {
    const ev = evaluateConnect({ request: { host: 'evil.test', port: 443, method: 'CONNECT' }, rules, session, policy: PolicyEngine.compile(base), now: 0 });
    expect(ev.decision).toMatchObject({ effect: 'deny', rule: 'allow-list', host: 'evil.test' });
    if (ev.decision.effect === 'deny') {
      expect(ev.decision.reason).toContain('evil.test:443');
      expect(ev.decision.reason).toContain('berth gate set session_x --egress-allow evil.test');
    }
  });

  it('allows a listed host under the default policy; a Cedar forbid wins over the list', () => {
    const ok = evaluateConnect({ request: { host: 'PYPI.org', port: 443, method: 'CONNECT' }, rules, session, policy: PolicyEngine.compile(base), now: 0 });
    expect(ok.decision).toMatchObject({ effect: 'allow', host: 'pypi.org', entry: 'pypi.org' });
    const policy = PolicyEngine.compile(
      `${base}\n@id("no-pypi")\n@reason("packages come from the mirror")\nforbid (principal, action == Action::"net.connect", resource) when { context.host == "pypi.org" && context.port == 443 };\n`,
    );
    const no = evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy, now: 0 });
    expect(no.decision).toMatchObject({ effect: 'deny', rule: 'policy', policyIds: ['no-pypi'] });
    if (no.decision.effect === 'deny') expect(no.decision.reason).toContain('packages come from the mirror');
    // Group rules cover it too.
    const quiet = PolicyEngine.compile(`${base}\nforbid (principal, action in Action::"write", resource) when { context.hourUtc >= 22 };\n`);
    expect(evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy: quiet, now: 23 * 3_600_000 }).decision.effect).toBe('deny');
    expect(evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy: quiet, now: 3_600_000 }).decision.effect).toBe('allow');
  });

  it('refuses an invalid destination', () => {
    for (const [host, port] of [['', 80], ['a b', 80], ['x.test', 0], ['x.test', 70000]] as const) {
      expect(evaluateConnect({ request: { host, port }, rules: { allow: ['*.test'], cidrs: [] }, session, policy: PolicyEngine.compile(base), now: 0 }).decision).toMatchObject({ effect: 'deny', rule: 'bad-request' });
    }
  });
});

describe('evaluateConnect for http.request (forbidsOnly)', () => {
  it('needs no net.connect permit, but a net.connect forbid still refuses', () => {
    const rules = { allow: ['pypi.org'], cidrs: [] };
    const permitNothing = PolicyEngine.compile('permit (principal, action == Action::"fs.read", resource);');
    expect(evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy: permitNothing, now: 0 }).decision.effect).toBe('deny');
    expect(evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy: permitNothing, now: 0, forbidsOnly: true }).decision.effect).toBe('allow');
    const forbid = PolicyEngine.compile('forbid (principal, action == Action::"net.connect", resource) when { context.host == "pypi.org" };');
    expect(evaluateConnect({ request: { host: 'pypi.org', port: 443 }, rules, session, policy: forbid, now: 0, forbidsOnly: true }).decision).toMatchObject({ effect: 'deny', rule: 'policy' });
  });
});
