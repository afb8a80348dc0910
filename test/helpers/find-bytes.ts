/**
 * Which files under a directory hold a byte string, looking inside gVisor checkpoint images too: runsc
 * compresses a checkpoint's state file by default (`--compression=flate-best-speed`), so a plain grep would
 * not see a session's data in it. A state file is `gVisorSF`, an 8-byte big-endian metadata length, the
 * metadata (JSON), a 32-byte HMAC, then runsc's compressio stream: a 4-byte chunk size and chunks, each a
 * 4-byte length and raw deflate data. Anything else is searched as it is.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { inflateRawSync } from 'node:zlib';

const MAGIC = Buffer.from('gVisorSF');

/** The bytes of a file as a reader of it would see them: a compressed state file inflated, else as is. */
export function expandCheckpoint(b: Buffer): Buffer {
  if (b.length < 16 || !b.subarray(0, 8).equals(MAGIC)) return b;
  let o = 8;
  const metaLen = Number(b.readBigUInt64BE(o));
  o += 8;
  const meta = JSON.parse(b.subarray(o, o + metaLen).toString()) as { compression?: string };
  o += metaLen + 32;
  if (meta.compression === 'none') return b;
  o += 4; // chunk size
  const out: Buffer[] = [];
  while (o + 4 <= b.length) {
    const n = b.readUInt32BE(o);
    o += 4;
    out.push(inflateRawSync(b.subarray(o, o + n)));
    o += n;
  }
  return Buffer.concat(out);
}

/** Files below dir (recursively, symlinks not followed) whose bytes, or expanded checkpoint, contain needle. */
export async function filesContaining(dir: string, needle: string | Buffer): Promise<string[]> {
  const hits: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = join(dir, e.name);
    if (e.isDirectory()) hits.push(...(await filesContaining(p, needle)));
    else if (e.isFile()) {
      const b = await readFile(p).catch(() => Buffer.alloc(0));
      if (b.includes(needle) || expandCheckpoint(b).includes(needle)) hits.push(p);
    }
  }
  return hits;
}
