/** The CLI's view of the environment: which server, which token. */
import { AppError } from '../core/errors.js';
import { Berth, resolveEnv } from '../sdk/node.js';

export function clientFromEnv(): Berth {
  const r = resolveEnv(process.env, process.cwd());
  if (!r.options.token) {
    throw new AppError(
      'unauthenticated',
      `no token: set BERTH_TOKEN, or BERTH_DATA to the server's data directory (${r.rootKeyPath} does not exist)`,
    );
  }
  return new Berth(r.options);
}

export const debugEnabled = (): boolean => process.env.BERTH_DEBUG === '1';

/** The local terminal type, passed to a remote terminal (`berth shell`). */
export const localTerm = (): string | undefined => process.env.TERM;
