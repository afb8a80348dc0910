/**
 * The computer tool's gate side (issue 11): the per-action required arguments, points checked against the
 * screen before anything runs, points shown to Cedar as {x, y} so a policy can ask for approval of clicks in
 * a region, and screenshots validated at the result stage as the PNG of the size they declare.
 */
import { deflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { sha256Hex } from '../core/index.js';
import { initialBreakerState, resolveBreakerSettings } from './breaker.js';
import { PolicyEngine } from './cedar.js';
import { COMPUTER, computerArgProblem, screenshotSize } from './computer-tool.js';
import { DEFAULT_POLICY_TEXT } from './default-policy.js';
import { checkResult, evaluate, type EvaluateInput } from './gate.js';

const NOW = Date.UTC(2026, 0, 1);
const SCREEN = { width: 1280, height: 800 };
const breaker = { state: initialBreakerState(), settings: resolveBreakerSettings({}) };

function input(args: unknown, over: Partial<EvaluateInput> = {}): EvaluateInput {
  return {
    toolName: 'computer',
    tool: COMPUTER,
    args,
    session: { id: 'ses_1', tenantId: 'ten_1', metadata: {}, callsInSession: 0 },
    policy: PolicyEngine.compile(DEFAULT_POLICY_TEXT),
    breaker,
    now: NOW,
    screen: SCREEN,
    ...over,
  };
}

/** A 1-row PNG of the given width (colour type 2, 8 bit), built by hand. */
function png(width: number, height: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    return Buffer.concat([len, Buffer.from(type, 'latin1'), data, Buffer.alloc(4)]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  const raw = Buffer.alloc(height * (width * 3 + 1));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

describe('computer: arguments', () => {
  it('allows each action with what it needs, and refuses one without it', () => {
    expect(evaluate(input({ action: 'screenshot' })).decision.effect).toBe('allow');
    expect(evaluate(input({ action: 'left_click', coordinate: [10, 20] })).decision.effect).toBe('allow');
    expect(evaluate(input({ action: 'type', text: 'hello' })).decision.effect).toBe('allow');
    for (const bad of [{ action: 'type' }, { action: 'mouse_move' }, { action: 'left_click_drag', coordinate: [1, 1] }, { action: 'wait' }, { action: 'zoom' }, { action: 'fly' }, { action: 'left_click', coordinate: [1] }]) {
      expect(evaluate(input(bad)).decision).toMatchObject({ effect: 'deny', stage: 'arguments', code: 'invalid_arguments' });
    }
  });

  it('refuses points outside the screenshot, and every action in a session without a desktop', () => {
    expect(computerArgProblem({ coordinate: [1279, 799] }, SCREEN)).toBeNull();
    expect(computerArgProblem({ coordinate: [1280, 0] }, SCREEN)).toMatch(/outside the 1280x800/);
    expect(computerArgProblem({ start_coordinate: [0, 800] }, SCREEN)).toMatch(/start_coordinate/);
    expect(computerArgProblem({ region: [10, 10, 5, 20] }, SCREEN)).toMatch(/x1 > x0/);
    expect(evaluate(input({ action: 'left_click', coordinate: [2000, 10] })).decision).toMatchObject({ effect: 'deny', code: 'invalid_arguments' });
    expect(evaluate(input({ action: 'screenshot' }, { screen: null })).decision).toMatchObject({ effect: 'deny', stage: 'arguments', code: 'invalid_arguments' });
  });

  it('works in screenshot pixels: a wide screen is scaled to 1280 wide, and its points checked in that space', () => {
    expect(screenshotSize({ width: 1920, height: 1080 })).toEqual({ width: 1280, height: 720, scale: 1280 / 1920 });
    expect(computerArgProblem({ coordinate: [1300, 10] }, { width: 1920, height: 1080 })).toMatch(/1280x720/);
  });
});

describe('computer: policy', () => {
  const policy = PolicyEngine.compile(
    [
      '@id("permit-others") permit (principal, action, resource) unless { action == Action::"computer" };',
      '@id("permit-desktop") permit (principal, action == Action::"computer", resource) unless { context.args.action == "type" || (context.args has coordinate && context.args.coordinate.x >= 1000) };',
      '@id("approve-typing") @approval("required") permit (principal, action == Action::"computer", resource) when { context.args.action == "type" };',
      '@id("approve-right-edge") @approval("required") permit (principal, action == Action::"computer", resource) when { context.args has coordinate && context.args.coordinate.x >= 1000 };',
    ].join('\n'),
  );

  it('sees context.args.action and points as {x, y}: screenshots run, typing and clicks at the right edge ask', () => {
    expect(evaluate(input({ action: 'screenshot' }, { policy })).decision.effect).toBe('allow');
    expect(evaluate(input({ action: 'left_click', coordinate: [999, 5] }, { policy })).decision.effect).toBe('allow');
    const ask = evaluate(input({ action: 'left_click', coordinate: [1000, 5] }, { policy })).decision;
    expect(ask).toMatchObject({ effect: 'ask', policyIds: ['approve-right-edge'] });
    expect(evaluate(input({ action: 'type', text: 'x' }, { policy })).decision).toMatchObject({ effect: 'ask', policyIds: ['approve-typing'] });
  });
});

describe('computer: result', () => {
  const check = (output: unknown) => checkResult({ tool: COMPUTER, argsDigest: 'd', output, breaker, now: NOW });
  const shot = (p: Buffer, over: Record<string, unknown> = {}) => ({ mimeType: 'image/png', data: p.toString('base64'), width: 4, height: 3, sha256: sha256Hex(p), ...over });

  it('passes a screenshot that is the PNG it declares', () => {
    expect(check({ action: 'screenshot', screen: SCREEN, screenshot: shot(png(4, 3)) }).ok).toBe(true);
  });

  it('refuses a screenshot of another size, not a PNG, or not matching its digest', () => {
    const wrong = check({ action: 'screenshot', screen: SCREEN, screenshot: shot(png(5, 3)) });
    expect(wrong.ok).toBe(false);
    expect(wrong.verdict).toMatchObject({ code: 'result_invalid' });
    const garbage = Buffer.from('GIF89a not a png at all, but long enough to have a header');
    expect(check({ action: 'screenshot', screen: SCREEN, screenshot: shot(garbage) }).ok).toBe(false);
    expect(check({ action: 'screenshot', screen: SCREEN, screenshot: shot(png(4, 3), { sha256: 'a'.repeat(64) }) }).ok).toBe(false);
  });
});
