/**
 * The client→server half of RFB 3.8 (RFC 6143 and the community extensions noVNC speaks), read by the
 * desktop bridge (desktop-ws.ts) between a browser and the VNC server inside a session. It passes what a
 * viewer needs (handshake, pixel format, encodings, update requests, fences) and lets input through only
 * while `mayInput()` says so: a watcher's keys, pointer, clipboard and resize requests are dropped here, on
 * the server, whatever the page does. Anything it cannot read ends the connection (RfbProtocolError): a
 * stream it misparsed once would be misread from then on, input included.
 *
 * Pure and incremental: push() takes chunks split anywhere and returns the bytes to forward. A message is
 * decided once it is complete, so `mayInput()` is asked at that moment and a change of control lease applies
 * from the next message on.
 *
 * Two extensions change how later client messages are framed or what they do: ExtendedMouseButtons (a
 * PointerEvent of 7 bytes) and XVP (power off, reboot, reset). The filter removes both from SetEncodings,
 * so the server never enables them and the client never uses them; an XVP message (250) is then unknown.
 */
import { AppError, ConfigError } from '../core/index.js';

/** Largest ClientCutText (plain or extended) let through, bytes. */
export const RFB_MAX_CUT_TEXT = 1 << 20;

/** The pseudo-encodings the filter takes out of SetEncodings (see above). */
export const RFB_STRIPPED_ENCODINGS: readonly number[] = Object.freeze([
  -316, // ExtendedMouseButtons: a PointerEvent grows to 7 bytes once the server acknowledges it
  -309, // XVP: machine power operations
]);

/** Client message types and what each is. */
export const RFB_CLIENT_MESSAGES = Object.freeze({
  0: 'SetPixelFormat',
  2: 'SetEncodings',
  3: 'FramebufferUpdateRequest',
  4: 'KeyEvent',
  5: 'PointerEvent',
  6: 'ClientCutText',
  150: 'EnableContinuousUpdates',
  248: 'ClientFence',
  251: 'SetDesktopSize',
  255: 'QEMUClientMessage',
} as const);

/** The messages that act on the desktop: forwarded only while mayInput() is true. */
const INPUT_TYPES: ReadonlySet<number> = new Set([4, 5, 6, 251, 255]);

/** A fence's payload may be at most this long, bytes (RFB community spec). */
const MAX_FENCE = 64;

export class RfbProtocolError extends AppError {
  constructor(message: string, details: Record<string, unknown> = {}) {
    super('invalid_argument', `rfb: ${message}`, { details: { reason: 'rfb_protocol', ...details } });
  }
}

export interface RfbFilterOptions {
  /** Whether input may reach the desktop now; asked once per input message, when it is complete. */
  mayInput: () => boolean;
  /** Largest ClientCutText let through, bytes; a longer one ends the connection. Default RFB_MAX_CUT_TEXT. */
  maxCutText?: number;
}

type Phase = 'version' | 'security' | 'init' | 'messages';

export class RfbClientFilter {
  private phase: Phase = 'version';
  private buf: Buffer = Buffer.alloc(0);
  private readonly mayInput: () => boolean;
  private readonly maxCutText: number;
  private failed: RfbProtocolError | null = null;
  /** Input messages dropped so far (mayInput said no). */
  dropped = 0;
  /** Client messages passed on so far (after the handshake). */
  forwarded = 0;

  constructor(o: RfbFilterOptions) {
    if (typeof o.mayInput !== 'function') throw new ConfigError('mayInput: must be a function');
    const max = o.maxCutText ?? RFB_MAX_CUT_TEXT;
    if (!Number.isInteger(max) || max < 0) throw new ConfigError(`maxCutText: must be a non-negative integer of bytes, got ${max}`);
    this.mayInput = o.mayInput;
    this.maxCutText = max;
  }

  /** Feeds client bytes; returns what to forward (possibly empty). Throws RfbProtocolError, then again on every call. */
  push(chunk: Uint8Array): Buffer {
    if (this.failed) throw this.failed;
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const out: Buffer[] = [];
    try {
      for (;;) {
        const n = this.need();
        if (n === null || this.buf.length < n) break;
        const msg = this.buf.subarray(0, n);
        this.buf = this.buf.subarray(n);
        const fwd = this.take(msg);
        if (fwd) out.push(fwd);
      }
    } catch (e) {
      this.failed = e instanceof RfbProtocolError ? e : new RfbProtocolError((e as Error).message);
      throw this.failed;
    }
    // Keep leftovers in a buffer of their own, so a big chunk already forwarded is not held alive by them.
    if (this.buf.length) this.buf = Buffer.from(this.buf);
    return out.length === 1 ? Buffer.from(out[0]!) : Buffer.concat(out);
  }

  /** Bytes the next unit takes, or null while its header is incomplete. Throws for what cannot be read. */
  private need(): number | null {
    const b = this.buf;
    switch (this.phase) {
      case 'version':
        return 12;
      case 'security':
      case 'init':
        return 1;
      case 'messages':
        break;
    }
    if (b.length < 1) return null;
    const type = b[0]!;
    switch (type) {
      case 0:
        return 20;
      case 2:
        return b.length < 4 ? null : 4 + 4 * b.readUInt16BE(2);
      case 3:
        return 10;
      case 4:
        return 8;
      case 5:
        return 6;
      case 6: {
        if (b.length < 8) return null;
        // A negative length is the Extended Clipboard form: |length| bytes of it follow.
        const len = Math.abs(b.readInt32BE(4));
        if (len > this.maxCutText) throw new RfbProtocolError(`ClientCutText of ${len} bytes is over the limit of ${this.maxCutText}`, { messageType: type, length: len });
        return 8 + len;
      }
      case 150:
        return 10;
      case 248: {
        if (b.length < 9) return null;
        if (b[8]! > MAX_FENCE) throw new RfbProtocolError(`ClientFence payload of ${b[8]} bytes (at most ${MAX_FENCE})`, { messageType: type });
        return 9 + b[8]!;
      }
      case 251:
        return b.length < 7 ? null : 8 + 16 * b[6]!;
      case 255: {
        if (b.length < 2) return null;
        if (b[1] !== 0) throw new RfbProtocolError(`QEMU client message subtype ${b[1]} is not supported (only 0, extended key event)`, { messageType: type, subtype: b[1] });
        return 12;
      }
      default:
        throw new RfbProtocolError(`unknown client message type ${type}`, { messageType: type });
    }
  }

  /** Decides one complete unit: the bytes to forward, or null to drop it. */
  private take(msg: Buffer): Buffer | null {
    switch (this.phase) {
      case 'version': {
        const v = msg.toString('latin1');
        if (v !== 'RFB 003.008\n' && v !== 'RFB 003.007\n') {
          throw new RfbProtocolError(`protocol version ${JSON.stringify(v)} is not supported (RFB 003.007 or 003.008)`);
        }
        this.phase = 'security';
        return msg;
      }
      case 'security':
        if (msg[0] !== 1) throw new RfbProtocolError(`security type ${msg[0]} is not offered (only 1, None: Berth authenticates the WebSocket)`, { securityType: msg[0] });
        this.phase = 'init';
        return msg;
      case 'init':
        this.phase = 'messages';
        return Buffer.from([1]); // shared: a viewer never disconnects the others (or the agent's screenshots)
      case 'messages':
        break;
    }
    const type = msg[0]!;
    if (INPUT_TYPES.has(type) && !this.mayInput()) {
      this.dropped++;
      return null;
    }
    this.forwarded++;
    return type === 2 ? stripEncodings(msg) : msg;
  }
}

/** SetEncodings without RFB_STRIPPED_ENCODINGS (the message itself when none is there). */
function stripEncodings(msg: Buffer): Buffer {
  const n = msg.readUInt16BE(2);
  const keep: number[] = [];
  for (let i = 0; i < n; i++) {
    const e = msg.readInt32BE(4 + 4 * i);
    if (!RFB_STRIPPED_ENCODINGS.includes(e)) keep.push(e);
  }
  if (keep.length === n) return msg;
  const out = Buffer.alloc(4 + 4 * keep.length);
  out[0] = 2;
  out.writeUInt16BE(keep.length, 2);
  keep.forEach((e, i) => out.writeInt32BE(e, 4 + 4 * i));
  return out;
}
