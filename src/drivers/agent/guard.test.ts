import { describe, expect, it } from 'vitest';
import { PathNotCanonicalError } from '../../core/errors.js';
import { runGuarded, type GuardHost } from './guard.js';

/** A channel with an agent of protocol 1 (restored from an older image): no guards, so paths are resolved first. */
function v1(real: Record<string, string>, asked: string[]): GuardHost {
  return {
    version: () => 1,
    assertOpen: () => undefined,
    newId: () => 1,
    addRoute: () => undefined,
    release: () => undefined,
    pending: () => undefined,
    realpath: async (p) => {
      asked.push(p);
      return real[p] ?? p;
    },
  };
}

describe('runGuarded with an agent of protocol 1', () => {
  it('resolves each path first and runs the operation only if all are canonical', async () => {
    const asked: string[] = [];
    let ran = 0;
    expect(await runGuarded(v1({}, asked), ['/a', '/b'], async () => ++ran)).toBe(1);
    expect(asked).toEqual(['/a', '/b']);
    const e = await runGuarded(v1({ '/link': '/etc' }, []), ['/a', '/link'], async () => ++ran).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PathNotCanonicalError);
    expect(e).toMatchObject({ path: '/link', canonical: '/etc' });
    expect(ran).toBe(1);
  });
});
