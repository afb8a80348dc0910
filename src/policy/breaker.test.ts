import { describe, expect, it } from 'vitest';
import { isAppError } from '../core/index.js';
import { check, initialBreakerState, recordCall, recordOutcome, resetBreaker, resolveBreakerSettings } from './breaker.js';
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
  it('uses a sliding window', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 5; i++) s = recordCall(s, settings, i * 1000);
    // the first call (t=0) leaves the window at t=60000
    s = recordCall(s, settings, 60_000);
    expect(s.open).toBe(false);
    s = recordCall(s, settings, 60_001);
    expect(s.open).toBe(true);
  });
  it('keeps a bounded number of call times', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 100; i++) s = recordCall(s, settings, i);
    expect(s.recentCalls.length).toBeLessThanOrEqual(settings.perMinute + 1);
  });
  it('does not heal when the window moves on', () => {
    let s = initialBreakerState();
    for (let i = 0; i < 6; i++) s = recordCall(s, settings, i);
    expect(check(s, settings, 10 * 60_000).tripped).toBe(true);
  });
});
