/** The SDK's only reader of the environment; used by Berth.fromEnv() and the CLI. */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEFAULT_URL, type BerthOptions } from './client.js';

export interface EnvResolution {
  options: BerthOptions;
  /** Where the token came from, for error hints. */
  tokenSource: 'BERTH_TOKEN' | 'root.key' | null;
  /** $BERTH_DATA/root.key (BERTH_DATA default ./.berth), resolved against cwd. */
  rootKeyPath: string;
}

/**
 * BERTH_URL (default http://127.0.0.1:7070); BERTH_TOKEN, else the root key in $BERTH_DATA/root.key
 * (BERTH_DATA default ./.berth). A missing key file is not an error here: calls then fail unauthenticated.
 */
export function resolveEnv(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): EnvResolution {
  const rootKeyPath = join(resolve(cwd, env.BERTH_DATA || './.berth'), 'root.key');
  const url = env.BERTH_URL || DEFAULT_URL;
  if (env.BERTH_TOKEN) return { options: { url, token: env.BERTH_TOKEN }, tokenSource: 'BERTH_TOKEN', rootKeyPath };
  let token: string | undefined;
  try {
    token = readFileSync(rootKeyPath, 'utf8').trim() || undefined;
  } catch {
    token = undefined;
  }
  return { options: { url, token }, tokenSource: token ? 'root.key' : null, rootKeyPath };
}
