/** The host-side PNG work on screenshots: decode what scrot writes, scale wide screens down, mark a point. */
import { deflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { pngInfo } from '../core/index.js';
import { decodePng, drawMarker, encodePng, scaleDown, type Rgb } from './png.js';

function gradient(width: number, height: number): Rgb {
  const pixels = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) pixels.set([x % 256, y % 256, (x + y) % 256], (y * width + x) * 3);
  return { width, height, pixels };
}

/** An RGBA PNG using every filter type (0–4, one per row in turn), as other encoders write them. */
function rgbaWithFilters(img: Rgb): Buffer {
  const bpp = 4;
  const stride = img.width * bpp;
  const rows: Buffer[] = [];
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < img.height; y++) {
    const cur = Buffer.alloc(stride);
    for (let x = 0; x < img.width; x++) {
      img.pixels.copy(cur, x * bpp, (y * img.width + x) * 3, (y * img.width + x) * 3 + 3);
      cur[x * bpp + 3] = 255;
    }
    const f = y % 5;
    const out = Buffer.alloc(stride + 1);
    out[0] = f;
    for (let i = 0; i < stride; i++) {
      const a = i >= bpp ? cur[i - bpp]! : 0;
      const b = prev[i]!;
      const c = i >= bpp ? prev[i - bpp]! : 0;
      const p = a + b - c;
      const pr = Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c) ? a : Math.abs(p - b) <= Math.abs(p - c) ? b : c;
      const pred = f === 0 ? 0 : f === 1 ? a : f === 2 ? b : f === 3 ? (a + b) >> 1 : pr;
      out[1 + i] = (cur[i]! - pred) & 0xff;
    }
    rows.push(out);
    prev = cur;
  }
  const chunk = (type: string, data: Buffer) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    return Buffer.concat([len, Buffer.from(type, 'latin1'), data, Buffer.alloc(4)]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(img.width, 0);
  ihdr.writeUInt32BE(img.height, 4);
  ihdr[8] = 8;
  ihdr[9] = 6;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(Buffer.concat(rows))), chunk('IEND', Buffer.alloc(0))]);
}

describe('png', () => {
  it('round-trips RGB through encode and decode', () => {
    const img = gradient(37, 23);
    const png = encodePng(img);
    expect(pngInfo(png)).toMatchObject({ width: 37, height: 23, bitDepth: 8, colorType: 2 });
    expect(decodePng(png).pixels.equals(img.pixels)).toBe(true);
  });

  it('decodes RGBA with every filter type to the same pixels', () => {
    const img = gradient(19, 11);
    expect(decodePng(rgbaWithFilters(img)).pixels.equals(img.pixels)).toBe(true);
  });

  it('refuses what it cannot decode, naming it', () => {
    expect(() => decodePng(Buffer.from('not a png'))).toThrow(/not a PNG/);
  });

  it('scales down by area: 1920x1080 → 1280x720, flat colour stays flat', () => {
    const flat: Rgb = { width: 1920, height: 1080, pixels: Buffer.alloc(1920 * 1080 * 3, 200) };
    const s = scaleDown(flat, 1280);
    expect([s.width, s.height]).toEqual([1280, 720]);
    expect(s.pixels.every((b) => b === 200)).toBe(true);
    expect(scaleDown(flat, 4000)).toBe(flat);
  });

  it('marks a point in red without touching the rest, clipped at the edges', () => {
    const img: Rgb = { width: 64, height: 64, pixels: Buffer.alloc(64 * 64 * 3, 255) };
    const m = drawMarker(img, 32, 32);
    const at = (x: number, y: number) => [...m.pixels.subarray((y * 64 + x) * 3, (y * 64 + x) * 3 + 3)];
    expect(at(32, 32)).toEqual([255, 0, 0]);
    expect(at(32 + 12, 32)).toEqual([255, 0, 0]);
    expect(at(2, 2)).toEqual([255, 255, 255]);
    expect(img.pixels.every((b) => b === 255)).toBe(true); // the input is not changed
    expect(() => drawMarker(img, 0, 63)).not.toThrow();
  });
});
