/** Async iterables → response streams, with the first chunk pulled before headers go out. */
import { isAppError } from '../core/index.js';
import type { Logger } from './log.js';

/**
 * Pulls the first chunk before returning, so an error that the source only reports on first read (a
 * missing file, say) still becomes a proper error response. Later errors abort the response, which the
 * client sees as a truncated transfer, never as a short success.
 */
export async function byteStream(
  source: AsyncIterable<Uint8Array>,
  opts: { log: Logger; what: string },
): Promise<ReadableStream<Uint8Array>> {
  const it = source[Symbol.asyncIterator]();
  const first = await it.next();
  let pending: Uint8Array | null = first.done ? null : first.value;
  let ended = !!first.done;
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      if (pending) {
        ctrl.enqueue(pending);
        pending = null;
        return;
      }
      if (ended) return ctrl.close();
      try {
        const r = await it.next();
        if (r.done) {
          ended = true;
          ctrl.close();
        } else if (r.value.byteLength > 0) ctrl.enqueue(r.value);
      } catch (e) {
        ended = true;
        opts.log.warn(`${opts.what} failed mid-stream`, { error: isAppError(e) ? e.code : 'internal', message: (e as Error).message });
        ctrl.error(e);
      }
    },
    async cancel() {
      ended = true;
      await it.return?.().catch(() => undefined);
    },
  });
}
