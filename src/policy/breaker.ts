/**
 * The circuit breaker, as pure state transitions. It trips on
 * - `failures` identical calls (same tool, same canonical arguments) failing in a row, or
 * - more than `perMinute` calls in any sliding 60 s window,
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
  return { open: false, openedAt: null, trip: null, reason: null, recentCalls: [], streakKey: null, streakTool: null, streakFailures: 0 };
}

function trip(state: BreakerState, now: number, kind: BreakerState['trip'], reason: string): BreakerState {
  if (state.open) return state;
  return { ...state, open: true, openedAt: now, trip: kind, reason };
}

/**
 * Counts a call starting at `now`. Keeps at most perMinute + 1 start times; when more than
 * perMinute fall within the last 60 s, the breaker trips (and this call is refused by check()).
 */
export function recordCall(state: BreakerState, settings: BreakerSettings, now: number): BreakerState {
  const since = now - WINDOW_MS;
  const recent = state.recentCalls.filter((t) => t > since);
  recent.push(now);
  if (recent.length > settings.perMinute + 1) recent.splice(0, recent.length - (settings.perMinute + 1));
  const next: BreakerState = { ...state, recentCalls: recent };
  if (recent.length > settings.perMinute) {
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
  const since = now - WINDOW_MS;
  let n = 0;
  for (const t of state.recentCalls) if (t > since) n++;
  if (n > settings.perMinute) return { tripped: true, reason: `more than ${settings.perMinute} calls within 60 s`, openedAt: null };
  return { tripped: false };
}

/** An operator's reset: closed, streak and rate window cleared. The engine audits who reset it. */
export function resetBreaker(): BreakerState {
  return initialBreakerState();
}

/** check() under a name that reads well next to other imports. */
export const checkBreaker = check;
