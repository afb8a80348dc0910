/** The guest's clock after a stop, and waiting on a promise under a caller's signal. */
import { abortError } from '../../core/index.js';
import type { AgentChannel } from '../agent/channel.js';

/** What syncClockSoon needs of a live machine: its channel, its id, and where the sync in flight is kept. */
export interface ClockedMachine {
  channel?: AgentChannel;
  spec: { sandboxId: string };
  clockSync?: Promise<void>;
  /** Set when the machine is being destroyed or hibernated: a sync its channel's closing cut short is not a failure. */
  stopping: boolean;
}

/**
 * Sets the guest's clock to the host's, in the background. A stopped VM's clock stands still (TCG's
 * virtual clock and kvmclock both hide the gap from the guest), so after resume, wake and fork the guest
 * is behind by as long as it was stopped. The agent protocol has no clock command, so this is one exec
 * of date(1) (~20-80 ms under TCG); the caller's next command or file operation waits for it (the
 * driver's settledChannel), so everything that goes through the driver sees the right time without
 * resume or restore paying for it.
 */
export function syncClockSoon(log: ((line: string) => void) | undefined, live: ClockedMachine): void {
  const channel = live.channel;
  if (!channel) return;
  const sync = (async () => {
    const now = Date.now();
    const stamp = `@${Math.floor(now / 1000)}.${String(now % 1000).padStart(3, '0')}`;
    const h = await channel.exec({ argv: ['/bin/date', '-u', '-s', stamp], timeoutMs: 10_000 });
    const x = await h.wait();
    if (x.code !== 0) log?.(`clock sync in ${live.spec.sandboxId} failed with exit ${x.code}`);
  })().catch((e: unknown) => {
    if (!live.stopping) log?.(`clock sync in ${live.spec.sandboxId} failed: ${(e as Error).message}`);
  });
  // Forgotten once settled, unless a later sync took its place (compare with what was stored: the finally's promise).
  const kept: Promise<void> = sync.finally(() => {
    if (live.clockSync === kept) live.clockSync = undefined;
  });
  live.clockSync = kept;
}

/** p, or the signal's abort error if it aborts first. */
export async function withSignal<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) throw abortError(signal);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(abortError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
