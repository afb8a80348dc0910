import { describe, expect, it } from 'vitest';
import { SESSION_STATES, TRANSITIONS, assertTransition, canTransition } from './state.js';

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
