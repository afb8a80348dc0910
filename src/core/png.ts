/**
 * PNG header facts (https://www.w3.org/TR/png/#11IHDR): the signature and the IHDR chunk, which must come
 * first. Enough to check that bytes claiming to be a PNG of a given size are one, without decoding pixels.
 */

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

export interface PngInfo {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  interlace: number;
}

/** The header of a PNG, or null when `bytes` do not start like one (signature, then a 13-byte IHDR). */
export function pngInfo(bytes: Uint8Array): PngInfo | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b.length < 33 || !b.subarray(0, 8).equals(SIGNATURE)) return null;
  if (b.readUInt32BE(8) !== 13 || b.toString('latin1', 12, 16) !== 'IHDR') return null;
  const width = b.readUInt32BE(16);
  const height = b.readUInt32BE(20);
  if (width === 0 || height === 0) return null;
  return { width, height, bitDepth: b[24]!, colorType: b[25]!, interlace: b[28]! };
}
