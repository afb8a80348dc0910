import { describe, expect, it } from 'vitest';
import { ASLEEP_STATES, LISTED_STATES, LIVE_STATES, SESSION_STATES, TRANSITIONS, UNSETTLED_STATES, assertTransition, canTransition } from './state.js';

describe('session state machine', () => {
  it('has a row for every state and names only known states', () => {
    expect(Object.keys(TRANSITIONS).sort()).toEqual([...SESSION_STATES].sort());
    for (const to of Object.values(TRANSITIONS).flat()) expect(SESSION_STATES).toContain(to);
  });

  it('agrees with assertTransition over every pair', () => {
    for (const from of SESSION_STATES) {
      for (const to of SESSION_STATES) {
        const legal = TRANSITIONS[from].includes(to);
        expect(canTransition(from, to)).toBe(legal);
        if (legal) expect(() => assertTransition(from, to)).not.toThrow();
        else expect(() => assertTransition(from, to)).toThrow(expect.objectContaining({ code: 'invalid_state' }));
      }
    }
  });

  it('makes terminated final and reachable from everywhere else', () => {
    expect(TRANSITIONS.terminated).toEqual([]);
    for (const s of SESSION_STATES) if (s !== 'terminated') expect(canTransition(s, 'terminated')).toBe(true);
  });

  it('lets only a live machine hibernate, and only a hibernated one wake', () => {
    const into = (to: string) => SESSION_STATES.filter((s) => (TRANSITIONS[s] as readonly string[]).includes(to));
    expect(into('hibernating').sort()).toEqual(['paused', 'running']);
    expect(into('waking')).toEqual(['hibernated']);
  });
});

describe('named state sets', () => {
  it('name known states and agree with the table', () => {
    const sets = { LIVE_STATES, ASLEEP_STATES, LISTED_STATES, UNSETTLED_STATES };
    for (const set of Object.values(sets)) for (const s of set) expect(SESSION_STATES).toContain(s);
    expect(LISTED_STATES).toEqual(SESSION_STATES.filter((s) => TRANSITIONS[s].length > 0));
    // A restart settles every state a step can be under way in, and leaves the resting ones alone.
    expect([...UNSETTLED_STATES].sort()).toEqual(SESSION_STATES.filter((s) => !['hibernated', 'failed', 'terminated'].includes(s)).sort());
    for (const s of LIVE_STATES) expect(UNSETTLED_STATES).toContain(s);
    // Asleep: every state on the way into, at, or out of hibernated.
    expect([...ASLEEP_STATES].sort()).toEqual(SESSION_STATES.filter((s) => canTransition(s, 'hibernated') || canTransition('hibernated', s) || s === 'hibernated').filter((s) => !['failed', 'terminated'].includes(s)).sort());
  });
});
