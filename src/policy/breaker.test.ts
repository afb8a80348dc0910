import { describe, expect, it } from 'vitest';
import { isAppError } from '../core/index.js';
import { check, initialBreakerState, normalizeBreakerState, recordCall, recordOutcome, resetBreaker, resolveBreakerSettings } from './breaker.js';
import type { BreakerState } from './types.js';

const settings = resolveBreakerSettings({ failures: 3, perMinute: 5 });

function fail(s: BreakerState, key: string, now = 0): BreakerState {
  return recordOutcome(s, settings, { callKey: key, tool: 'shell.exec', failed: true }, now);
}

describe('breaker settings', () => {
  it('defaults to 10 identical failures and 120 calls a minute', () => {
    expect(resolveBreakerSettings()).toEqual({ failures: 10, perMinute: 120 });
  });
  it('throws on invalid values instead of correcting them', () => {
    for (const bad of [{ failures: 0 }, { perMinute: 1.5 }, { perMinute: -1 }]) {
      try {
        resolveBreakerSettings(bad);
        expect.unreachable();
      } catch (e) {
        expect(isAppError(e) && e.code).toBe('invalid_argument');
      }
    }
  });
});

describe('identical failures', () => {
  it('trips after N identical failures in a row', () => {
    let s = initialBreakerState();
    s = fail(s, 'k');
    s = fail(s, 'k');
    expect(check(s, settings, 0).tripped).toBe(false);
    s = fail(s, 'k', 42);
    expect(s.open).toBe(true);
    expect(s.trip).toBe('identical_failures');
    expect(s.openedAt).toBe(42);
    expect(check(s, settings, 43).tripped).toBe(true);
  });
  it('a success or a different failing call breaks the row', () => {
    let s = initialBreakerState();
    s = fail(fail(s, 'k'), 'k');
    s = recordOutcome(s, settings, { callKey: 'k', tool: 'shell.exec', failed: false }, 0);
    s = fail(fail(s, 'k'), 'k');
    expect(s.open).toBe(false);
    s = fail(s, 'other');
    s = fail(fail(s, 'k'), 'k');
    expect(s.open).toBe(false);
  });
  it('stays open until reset', () => {
    let s = fail(fail(fail(initialBreakerState(), 'k'), 'k'), 'k');
    s = recordOutcome(s, settings, { callKey: 'x', tool: 'fs.read', failed: false }, 10);
    expect(check(s, settings, 1e9).tripped).toBe(true);
    s = resetBreaker();
    expect(check(s, settings, 1e9).tripped).toBe(false);
  });
});

describe('rate', () => {
  it('allows M calls in 60 s and trips on the next', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 5; i++) s = recordCall(s, settings, i * 1000);
    expect(check(s, settings, 5000).tripped).toBe(false);
    s = recordCall(s, settings, 5000);
    expect(s.open).toBe(true);
    expect(s.trip).toBe('rate');
  });
  it('uses a sliding window, counted in whole seconds', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 5; i++) s = recordCall(s, settings, i * 1000 + 500);
    // The first call (t=500) is in second 0, which is still partly inside the window until t=61000.
    expect(check(recordCall(s, settings, 60_999), settings, 60_999).tripped).toBe(true);
    s = recordCall(s, settings, 61_000);
    expect(s.open).toBe(false);
    s = recordCall(s, settings, 61_001);
    expect(s.open).toBe(true);
  });
  it('never lets more than perMinute calls through in any 60 s', () => {
    // Calls at every 10 ms for 3 minutes; at each moment, count the calls let through in the last 60 s.
    const perMinute = 50;
    const st = resolveBreakerSettings({ failures: 3, perMinute });
    let s = initialBreakerState();
    const through: number[] = [];
    for (let t = 0; t < 180_000; t += 10) {
      const next = recordCall(s, st, t);
      if (next.open) continue; // refused: an operator's reset would follow; the window goes on without it
      s = next;
      through.push(t);
      expect(through.filter((x) => x > t - 60_000).length).toBeLessThanOrEqual(perMinute);
    }
    expect(through.length).toBeGreaterThan(perMinute * 2); // and the window moves on
  });
  it('keeps at most 61 seconds whatever the rate and the limit', () => {
    const high = resolveBreakerSettings({ failures: 3, perMinute: 100_000 });
    let s = initialBreakerState();
    for (let i = 0; i < 90_000; i++) s = recordCall(s, high, i * 2);
    expect(s.open).toBe(false);
    expect(s.callsBySecond.length).toBeLessThanOrEqual(61);
    expect(s.callsBySecond.reduce((n, [, c]) => n + c, 0)).toBe(61 * 500); // 180 s ran, 500 calls a second; 61 seconds kept
    expect(JSON.stringify(s).length).toBeLessThan(2_000);
  });
  it('reads a row written with call times in ms (recentCalls) as seconds', () => {
    const { callsBySecond: _c, ...rest } = initialBreakerState();
    const old = { ...rest, recentCalls: [1_000, 1_500, 2_100, 70_000] } as unknown as BreakerState;
    const s = normalizeBreakerState(old);
    expect(s.callsBySecond).toEqual([[1, 2], [2, 1], [70, 1]]);
    expect('recentCalls' in s).toBe(false);
    expect(normalizeBreakerState({ ...initialBreakerState(), callsBySecond: [['x', 1]] } as unknown as BreakerState).callsBySecond).toEqual([]);
  });
  it('does not heal when the window moves on', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 6; i++) s = recordCall(s, settings, i);
    expect(check(s, settings, 10 * 60_000).tripped).toBe(true);
  });
});
