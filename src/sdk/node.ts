/**
 * `berth/sdk/node`: the SDK plus what only Node has, the environment and the data directory. Everything
 * of `berth/sdk` (which runs in browsers and bundlers too) is re-exported; `Berth` here also has fromEnv.
 *
 *   import { Berth } from 'berth/sdk/node';
 *   const berth = Berth.fromEnv();   // BERTH_URL, BERTH_TOKEN, else $BERTH_DATA/root.key
 */
import { Berth as BaseBerth, type BerthOptions } from './client.js';
import { resolveEnv } from './env.js';

export * from './index.js';
export { resolveEnv, type EnvResolution } from './env.js';

export class Berth extends BaseBerth {
  /** Options from BERTH_URL, BERTH_TOKEN / $BERTH_DATA/root.key; `overrides` win. */
  static fromEnv(overrides: BerthOptions = {}): Berth {
    const { options } = resolveEnv();
    return new Berth({ ...options, ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) });
  }
}

/** The same as Berth.fromEnv(). */
export function fromEnv(overrides: BerthOptions = {}): Berth {
  return Berth.fromEnv(overrides);
}
