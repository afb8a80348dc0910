/** Bytes in and out: request bodies from the SDK's accepted inputs, NDJSON lines from a response. */
import { decodeExecLine } from '../protocol/exec.js';
import type { ExecStreamLine } from '../protocol/types.js';

/** What file writes and exec stdin accept. A Node Readable is an AsyncIterable. */
export type BytesSource = Uint8Array | string | AsyncIterable<Uint8Array | string>;

const enc = new TextEncoder();

/**
 * A request body that is sent as it is produced: the source is pulled only as fast as the connection
 * drains, and cancelling the request stops (returns) the source.
 */
export function toBody(data: BytesSource): Uint8Array | string | ReadableStream<Uint8Array> {
  // isView, not instanceof: a Uint8Array from another realm (an iframe, a vm context) is bytes too.
  if (typeof data === 'string' || ArrayBuffer.isView(data)) return data as Uint8Array | string;
  const it = data[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>(
    {
      async pull(ctrl) {
        const r = await it.next();
        if (r.done) return ctrl.close();
        const chunk = typeof r.value === 'string' ? enc.encode(r.value) : r.value;
        if (chunk.byteLength > 0) ctrl.enqueue(chunk);
      },
      async cancel() {
        await it.return?.();
      },
    },
    { highWaterMark: 0 },
  );
}

/** Splits an NDJSON body into checked exec lines. */
export async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<ExecStreamLine> {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.trim() !== '') yield decodeExecLine(line);
    }
  }
  buf += dec.decode();
  if (buf.trim() !== '') yield decodeExecLine(buf);
}
