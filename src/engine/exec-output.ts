/**
 * What shell.exec keeps of a command's output: every byte when a stream fits the cap, else its first and last
 * parts (head and tail, together at most the cap) and the count of what was left out, without stopping the
 * command. Text is returned as a string only when it is valid UTF-8; anything else comes back as base64,
 * byte for byte, never with bytes replaced (U+FFFD) or a byte-order mark dropped.
 */

/** Keeps the first `headCap` bytes and a sliding window of the last `tailCap` bytes of one stream. */
export class HeadTail {
  private readonly head: Uint8Array[] = [];
  private headBytes = 0;
  /** The tail window, oldest first; trimmed from the front so it never holds more than tailCap bytes. */
  private readonly tail: Uint8Array[] = [];
  private tailBytes = 0;
  /** Every byte the stream produced. */
  total = 0;

  constructor(
    private readonly headCap: number,
    private readonly tailCap: number,
  ) {}

  push(chunk: Uint8Array): void {
    this.total += chunk.byteLength;
    let rest = chunk;
    if (this.headBytes < this.headCap) {
      const take = Math.min(this.headCap - this.headBytes, rest.byteLength);
      this.head.push(rest.subarray(0, take));
      this.headBytes += take;
      rest = rest.subarray(take);
    }
    if (rest.byteLength === 0 || this.tailCap === 0) return;
    if (rest.byteLength >= this.tailCap) {
      this.tail.length = 0;
      this.tail.push(rest.slice(rest.byteLength - this.tailCap));
      this.tailBytes = this.tailCap;
      return;
    }
    this.tail.push(rest.slice());
    this.tailBytes += rest.byteLength;
    while (this.tailBytes > this.tailCap) {
      const first = this.tail[0] as Uint8Array;
      const excess = this.tailBytes - this.tailCap;
      if (first.byteLength <= excess) {
        this.tail.shift();
        this.tailBytes -= first.byteLength;
      } else {
        this.tail[0] = first.subarray(excess);
        this.tailBytes -= excess;
      }
    }
  }

  /** Bytes neither in the head nor in the tail. */
  get omitted(): number {
    return this.total - this.headBytes - this.tailBytes;
  }

  parts(): { head: Buffer; tail: Buffer } {
    return { head: Buffer.concat(this.head), tail: Buffer.concat(this.tail) };
  }
}

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
function utf8(b: Uint8Array): string | null {
  try {
    return decoder.decode(b);
  } catch {
    return null;
  }
}

/** Length of the longest prefix of b that does not end inside a UTF-8 sequence (drops at most 3 bytes). */
function wholeCharsPrefix(b: Buffer): number {
  for (let back = 1; back <= Math.min(4, b.length); back++) {
    const c = b[b.length - back] as number;
    if ((c & 0xc0) === 0x80) continue; // a continuation byte: look further back for the lead
    const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return need > back ? b.length - back : b.length;
  }
  return b.length;
}
/** Offset of the first byte of b that is not a UTF-8 continuation byte (skips at most 3 bytes). */
function wholeCharsStart(b: Buffer): number {
  let i = 0;
  while (i < Math.min(3, b.length) && ((b[i] as number) & 0xc0) === 0x80) i++;
  return i;
}

/**
 * One stream of a shell.exec result, as fields of the result named after the stream (`stdout`, `stdoutTail`,
 * `stdoutBase64`, `stdoutTailBase64`, `stdoutBytes`, `stdoutOmittedBytes`): the text when it is valid UTF-8,
 * else base64; a tail only when bytes were left out. A cut that falls inside a character moves to the
 * character's edge (those bytes count as omitted), so a cut never turns text into base64.
 */
export function streamFields(name: 'stdout' | 'stderr', s: HeadTail): Record<string, string | number> {
  const { head, tail } = s.parts();
  if (s.omitted === 0) {
    const whole = Buffer.concat([head, tail]);
    const text = utf8(whole);
    return { ...(text === null ? { [`${name}Base64`]: whole.toString('base64') } : { [name]: text }), [`${name}Bytes`]: s.total };
  }
  const h = head.subarray(0, wholeCharsPrefix(head));
  const t = tail.subarray(wholeCharsStart(tail));
  const ht = utf8(h);
  const tt = utf8(t);
  if (ht !== null && tt !== null) {
    return { [name]: ht, [`${name}Tail`]: tt, [`${name}Bytes`]: s.total, [`${name}OmittedBytes`]: s.total - h.length - t.length };
  }
  return {
    [`${name}Base64`]: head.toString('base64'),
    [`${name}TailBase64`]: tail.toString('base64'),
    [`${name}Bytes`]: s.total,
    [`${name}OmittedBytes`]: s.omitted,
  };
}
