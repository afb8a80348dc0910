/**
 * The circuit breaker, as pure state transitions. It trips on
 * - `failures` identical calls (same tool, same canonical arguments) failing in a row, or
 * - more than `perMinute` calls in a sliding 60 s window, counted in whole seconds (a second any part of
 *   which lies in the last 60 s counts whole, so the window errs towards tripping: it may span up to 61 s,
 *   and never lets more than `perMinute` calls through in any 60 s),
 * and then stays open until an operator resets it (a rate trip does not heal by itself when the window
 * slides on: a runaway agent should be looked at).
 *
 * "In a row" means consecutive outcomes: any success, or a failure of a different call, restarts the streak.
 * What counts as a failure is the engine's call (see gate.ts: gate refusals, executor errors, a non-zero exit
 * of shell.exec, an invalid result).
 */
import { InvalidArgumentError } from '../core/index.js';
import type { BreakerSettings, BreakerState } from './types.js';

export const WINDOW_MS = 60_000;
export const DEFAULT_BREAKER_SETTINGS: Readonly<BreakerSettings> = Object.freeze({ failures: 10, perMinute: 120 });
/** Upper bounds, so a session setting cannot make the state unbounded. */
const MAX_IDENTICAL = 1_000_000;
const MAX_RATE = 100_000;

/** Options → resolved, frozen settings. Each field defaults as documented on BreakerSettings; bad values throw. */
export function resolveBreakerSettings(opts: Partial<BreakerSettings> = {}): Readonly<BreakerSettings> {
  const pick = (name: keyof BreakerSettings, max: number): number => {
    const v = opts[name] ?? DEFAULT_BREAKER_SETTINGS[name];
    if (!Number.isSafeInteger(v) || v < 1 || v > max) {
      throw new InvalidArgumentError(`breaker.${name}: must be an integer from 1 to ${max}`, { details: { field: `breaker.${name}`, value: v } });
    }
    return v;
  };
  return Object.freeze({ failures: pick('failures', MAX_IDENTICAL), perMinute: pick('perMinute', MAX_RATE) });
}

export function initialBreakerState(): BreakerState {
  return { open: false, openedAt: null, trip: null, reason: null, callsBySecond: [], streakKey: null, streakTool: null, streakFailures: 0 };
}

/** The first second still (partly) inside the window that ends at `now`. */
function firstSecond(now: number): number {
  return Math.floor((now - WINDOW_MS) / 1000);
}

function inWindow(calls: readonly (readonly [number, number])[], now: number): number {
  const first = firstSecond(now);
  let n = 0;
  for (const [sec, count] of calls) if (sec >= first) n += count;
  return n;
}

/**
 * A stored state in the current form. Rows written before the window was counted by the second hold
 * `recentCalls` (start times in ms): they are folded into seconds here, and anything unreadable is
 * dropped (the window restarts empty; the open/closed state and the streak are kept).
 */
export function normalizeBreakerState(state: BreakerState): BreakerState {
  const legacy = (state as { recentCalls?: unknown }).recentCalls;
  const { recentCalls: _old, ...rest } = state as BreakerState & { recentCalls?: unknown };
  let calls: [number, number][] = Array.isArray(state.callsBySecond) ? state.callsBySecond : [];
  if (Array.isArray(legacy)) {
    const bySecond = new Map<number, number>();
    for (const t of legacy) if (Number.isFinite(t)) bySecond.set(Math.floor((t as number) / 1000), (bySecond.get(Math.floor((t as number) / 1000)) ?? 0) + 1);
    calls = [...bySecond].sort((a, b) => a[0] - b[0]);
  }
  if (!calls.every((c) => Array.isArray(c) && c.length === 2 && Number.isSafeInteger(c[0]) && Number.isSafeInteger(c[1]) && c[1] > 0)) calls = [];
  return { ...rest, callsBySecond: calls };
}

function trip(state: BreakerState, now: number, kind: BreakerState['trip'], reason: string): BreakerState {
  if (state.open) return state;
  return { ...state, open: true, openedAt: now, trip: kind, reason };
}

/**
 * Counts a call starting at `now` in its second, dropping seconds that left the window (so at most 61 are
 * kept); when more than perMinute fall within the window, the breaker trips (and this call is refused by
 * check()).
 */
export function recordCall(state: BreakerState, settings: BreakerSettings, now: number): BreakerState {
  const first = firstSecond(now);
  const sec = Math.floor(now / 1000);
  const calls = state.callsBySecond.filter(([s]) => s >= first).map(([s, n]): [number, number] => [s, n]);
  const last = calls[calls.length - 1];
  if (last !== undefined && last[0] >= sec) last[1]++; // a clock step back counts in the newest second
  else calls.push([sec, 1]);
  const next: BreakerState = { ...state, callsBySecond: calls };
  if (inWindow(calls, now) > settings.perMinute) {
    return trip(next, now, 'rate', `more than ${settings.perMinute} calls within 60 s`);
  }
  return next;
}

export interface CallOutcome {
  /** argsDigest(tool, args): identical calls have equal keys. */
  callKey: string;
  tool: string;
  failed: boolean;
}

/** Records how a call ended; `failures` identical failures in a row trip the breaker. */
export function recordOutcome(state: BreakerState, settings: BreakerSettings, outcome: CallOutcome, now: number): BreakerState {
  if (!outcome.failed) return { ...state, streakKey: null, streakTool: null, streakFailures: 0 };
  const same = state.streakKey === outcome.callKey;
  const n = same ? state.streakFailures + 1 : 1;
  const next: BreakerState = { ...state, streakKey: outcome.callKey, streakTool: outcome.tool, streakFailures: n };
  if (n >= settings.failures) {
    return trip(next, now, 'identical_failures', `${n} identical ${outcome.tool} calls failed in a row`);
  }
  return next;
}

export type BreakerCheck = { tripped: false } | { tripped: true; reason: string; openedAt: number | null };

/**
 * Whether calls are refused now: the breaker is open, or (for a state not produced by recordCall) the
 * window already holds more calls than allowed.
 */
export function check(state: BreakerState, settings: BreakerSettings, now: number): BreakerCheck {
  if (state.open) return { tripped: true, reason: state.reason ?? 'the breaker is open', openedAt: state.openedAt };
  if (inWindow(state.callsBySecond, now) > settings.perMinute) return { tripped: true, reason: `more than ${settings.perMinute} calls within 60 s`, openedAt: null };
  return { tripped: false };
}

/** An operator's reset: closed, streak and rate window cleared. The engine audits who reset it. */
export function resetBreaker(): BreakerState {
  return initialBreakerState();
}

/** check() under a name that reads well next to other imports. */
export const checkBreaker = check;
