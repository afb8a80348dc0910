/**
 * A writer for the cpio "newc" format, the one the Linux kernel unpacks as an initramfs
 * (Documentation/driver-api/early-userspace/buffer-format.rst). Written here rather than spawning cpio(1)
 * so the archive needs no host tool, can hold device nodes without root, and is byte-for-byte
 * reproducible (fixed inode numbers and mtimes), which keeps the guest image's key honest.
 */

export type CpioEntry =
  | { type: 'dir'; path: string; mode?: number }
  | { type: 'file'; path: string; data: Uint8Array; mode?: number }
  | { type: 'symlink'; path: string; target: string }
  | { type: 'char'; path: string; major: number; minor: number; mode?: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

/** Builds one uncompressed newc archive, terminated by the TRAILER!!! entry. Paths are relative ("init", "bin/x"). */
export function cpioNewc(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  const push = (b: Buffer) => {
    parts.push(b);
    offset += b.length;
  };
  const pad = () => {
    const n = (4 - (offset % 4)) % 4;
    if (n) push(Buffer.alloc(n));
  };
  let ino = 1;
  const add = (name: string, mode: number, data: Uint8Array, rdev: { major: number; minor: number }, nlink: number) => {
    const nameBytes = Buffer.from(name + '\0', 'utf8');
    const fields = [ino++, mode, 0, 0, nlink, 0, data.length, 0, 0, rdev.major, rdev.minor, nameBytes.length, 0];
    push(Buffer.from('070701' + fields.map((f) => f.toString(16).padStart(8, '0')).join(''), 'ascii'));
    push(nameBytes);
    pad();
    if (data.length) push(Buffer.from(data.buffer, data.byteOffset, data.length));
    pad();
  };
  const none = { major: 0, minor: 0 };
  for (const e of entries) {
    const path = e.path.replace(/^\/+/, '');
    if (!path || path.split('/').includes('..')) throw new TypeError(`cpio: bad path ${JSON.stringify(e.path)}`);
    switch (e.type) {
      case 'dir':
        add(path, S_IFDIR | (e.mode ?? 0o755), new Uint8Array(0), none, 2);
        break;
      case 'file':
        add(path, S_IFREG | (e.mode ?? 0o644), e.data, none, 1);
        break;
      case 'symlink':
        add(path, S_IFLNK | 0o777, Buffer.from(e.target, 'utf8'), none, 1);
        break;
      case 'char':
        add(path, S_IFCHR | (e.mode ?? 0o600), new Uint8Array(0), { major: e.major, minor: e.minor }, 1);
        break;
    }
  }
  add('TRAILER!!!', 0, new Uint8Array(0), none, 1);
  return Buffer.concat(parts, offset);
}
