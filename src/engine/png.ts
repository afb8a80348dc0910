/**
 * Just enough PNG (https://www.w3.org/TR/png/) for screenshots: decode 8-bit RGB or RGBA without
 * interlacing (what scrot writes), scale down by area averaging, draw a marker, encode RGB. Screenshots
 * wider than SCREENSHOT_MAX_WIDTH are scaled here, on the host, and an approval's screenshot gets the
 * point an action would click drawn on it.
 */
import { deflateSync, inflateSync } from 'node:zlib';
import { InvalidArgumentError, pngInfo } from '../core/index.js';

export interface Rgb {
  width: number;
  height: number;
  /** width × height × 3 bytes, rows top to bottom. */
  pixels: Buffer;
}

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32(b: Buffer): number {
  let c = 0xffffffff;
  for (let i = 0; i < b.length; i++) c = CRC_TABLE[(c ^ b[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a);
  const pb = Math.abs(p - b);
  const pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/** Decodes an 8-bit RGB or RGBA PNG without interlacing to RGB; anything else is invalid_argument. */
export function decodePng(png: Uint8Array): Rgb {
  const info = pngInfo(png);
  if (!info) throw new InvalidArgumentError('not a PNG');
  const bpp = info.colorType === 2 ? 3 : info.colorType === 6 ? 4 : 0;
  if (info.bitDepth !== 8 || bpp === 0 || info.interlace !== 0) {
    throw new InvalidArgumentError(`unsupported PNG (bit depth ${info.bitDepth}, colour type ${info.colorType}, interlace ${info.interlace})`);
  }
  const b = Buffer.from(png.buffer, png.byteOffset, png.byteLength);
  const idat: Buffer[] = [];
  for (let off = 8; off + 12 <= b.length; ) {
    const len = b.readUInt32BE(off);
    const type = b.toString('latin1', off + 4, off + 8);
    if (type === 'IDAT') idat.push(b.subarray(off + 8, off + 8 + len));
    if (type === 'IEND') break;
    off += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const { width: w, height: h } = info;
  const stride = w * bpp;
  if (raw.length < h * (stride + 1)) throw new InvalidArgumentError('PNG image data is shorter than its header says');
  const cur = Buffer.alloc(stride);
  const prev = Buffer.alloc(stride);
  const out = Buffer.alloc(w * h * 3);
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)]!;
    const row = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let i = 0; i < stride; i++) {
      const a = i >= bpp ? cur[i - bpp]! : 0;
      const up = prev[i]!;
      const c = i >= bpp ? prev[i - bpp]! : 0;
      const x = row[i]!;
      cur[i] = (f === 0 ? x : f === 1 ? x + a : f === 2 ? x + up : f === 3 ? x + ((a + up) >> 1) : x + paeth(a, up, c)) & 0xff;
    }
    for (let px = 0; px < w; px++) cur.copy(out, (y * w + px) * 3, px * bpp, px * bpp + 3);
    cur.copy(prev);
  }
  return { width: w, height: h, pixels: out };
}

function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

/** Encodes RGB as an 8-bit PNG (filter Up on every row: flat screens compress well with it). */
export function encodePng(img: Rgb): Buffer {
  const { width: w, height: h, pixels } = img;
  const stride = w * 3;
  const raw = Buffer.alloc(h * (stride + 1));
  for (let y = 0; y < h; y++) {
    const o = y * (stride + 1);
    raw[o] = 2;
    for (let i = 0; i < stride; i++) raw[o + 1 + i] = (pixels[y * stride + i]! - (y > 0 ? pixels[(y - 1) * stride + i]! : 0)) & 0xff;
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return Buffer.concat([SIGNATURE, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw, { level: 6 })), chunk('IEND', Buffer.alloc(0))]);
}

/** Scales down to `width` (height in proportion) by averaging each target pixel's source area. */
export function scaleDown(img: Rgb, width: number): Rgb {
  if (width >= img.width) return img;
  const r = img.width / width;
  const height = Math.max(1, Math.round(img.height / r));
  const ry = img.height / height;
  const out = Buffer.alloc(width * height * 3);
  for (let ty = 0; ty < height; ty++) {
    const y0 = Math.floor(ty * ry);
    const y1 = Math.max(y0 + 1, Math.floor((ty + 1) * ry));
    for (let tx = 0; tx < width; tx++) {
      const x0 = Math.floor(tx * r);
      const x1 = Math.max(x0 + 1, Math.floor((tx + 1) * r));
      let sr = 0;
      let sg = 0;
      let sb = 0;
      for (let y = y0; y < y1; y++) {
        for (let x = x0; x < x1; x++) {
          const i = (y * img.width + x) * 3;
          sr += img.pixels[i]!;
          sg += img.pixels[i + 1]!;
          sb += img.pixels[i + 2]!;
        }
      }
      const n = (y1 - y0) * (x1 - x0);
      const o = (ty * width + tx) * 3;
      out[o] = Math.round(sr / n);
      out[o + 1] = Math.round(sg / n);
      out[o + 2] = Math.round(sb / n);
    }
  }
  return { width, height, pixels: out };
}

/** Draws a red ring with a cross at (x, y) (clipped to the image), so a reviewer sees where a click goes. */
export function drawMarker(img: Rgb, x: number, y: number): Rgb {
  const px = Buffer.from(img.pixels);
  const set = (cx: number, cy: number) => {
    if (cx < 0 || cy < 0 || cx >= img.width || cy >= img.height) return;
    const i = (cy * img.width + cx) * 3;
    px[i] = 255;
    px[i + 1] = 0;
    px[i + 2] = 0;
  };
  for (let dy = -16; dy <= 16; dy++) {
    for (let dx = -16; dx <= 16; dx++) {
      const d = Math.sqrt(dx * dx + dy * dy);
      const ring = d >= 11 && d <= 14;
      const cross = (dx === 0 || dx === 1) && Math.abs(dy) <= 6 ? true : (dy === 0 || dy === 1) && Math.abs(dx) <= 6;
      if (ring || cross) set(x + dx, y + dy);
    }
  }
  return { ...img, pixels: px };
}
