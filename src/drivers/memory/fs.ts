/**
 * The memory driver's file system: one tree of nodes per sandbox, with directories, regular files,
 * symbolic links and the `/dev/null` device. Failures carry the same codes as the agent-backed drivers
 * (ENOENT → not_found, EEXIST → conflict, ENOTDIR/EISDIR/ELOOP → invalid_argument, ENOTEMPTY → invalid_state,
 * ENOSPC → no_space).
 */
import { AppError, InvalidArgumentError, InvalidStateError, NoSpaceError, NotFoundError, type FileEntry, type FileStat, type FileType, type WatchEvent } from '../../core/index.js';

export type MemNode =
  | { type: 'dir'; mode: number; mtimeMs: number; children: Map<string, MemNode> }
  | { type: 'file'; mode: number; mtimeMs: number; data: Uint8Array }
  | { type: 'symlink'; mode: number; mtimeMs: number; target: string }
  /** A character device that discards writes and reads empty (`/dev/null`). */
  | { type: 'null'; mode: number; mtimeMs: number };

type Errno = 'ENOENT' | 'EEXIST' | 'ENOTDIR' | 'EISDIR' | 'ELOOP' | 'ENOTEMPTY' | 'EINVAL' | 'ENOSPC';

export function fsError(errno: Errno, path: string, message = `${path}: ${errno}`): AppError {
  const details = { errno, path };
  switch (errno) {
    case 'ENOENT':
      return new NotFoundError('path', path, { details });
    case 'EEXIST':
      return new AppError('conflict', message, { details });
    case 'ENOTEMPTY':
      return new InvalidStateError(message, { details });
    case 'ENOSPC':
      return new NoSpaceError(message, { details });
    default:
      return new InvalidArgumentError(message, { details });
  }
}

/** Symlinks followed on one lookup before ELOOP, as Linux's MAXSYMLINKS. */
const MAX_LINKS = 40;

const split = (path: string) => path.split('/').filter((p) => p !== '' && p !== '.');
export const joinPath = (parts: string[]) => `/${parts.join('/')}`;

interface Found {
  /** Canonical path of the looked-up name (symlinks in the parents resolved). */
  path: string;
  parent: Extract<MemNode, { type: 'dir' }>;
  name: string;
  node: MemNode | undefined;
}

export class MemoryFs {
  /** Watchers (the driver's watchFiles): told of every change made through this tree. */
  readonly watchers = new Set<(ev: WatchEvent) => void>();
  constructor(
    readonly root: Extract<MemNode, { type: 'dir' }>,
    private readonly now: () => number,
    /** Bytes the files may take (the spec's diskMb), as the agent's overlay in a gVisor sandbox; none: no limit. */
    readonly roomBytes?: number,
  ) {}

  private emit(type: WatchEvent['type'], path: string, isDir: boolean): void {
    for (const w of this.watchers) w({ type, path, isDir });
  }

  static fresh(now: () => number, roomBytes?: number): MemoryFs {
    const t = now();
    const dir = (children: [string, MemNode][] = []): MemNode => ({ type: 'dir', mode: 0o755, mtimeMs: t, children: new Map(children) });
    const root = dir([
      ['dev', dir([['null', { type: 'null', mode: 0o666, mtimeMs: t }]])],
      ['etc', dir()],
      ['root', dir()],
      ['run', dir()],
      ['tmp', dir()],
      ['work', dir()],
    ]) as Extract<MemNode, { type: 'dir' }>;
    return new MemoryFs(root, now, roomBytes);
  }

  /** A deep copy: what a checkpoint keeps and a restore starts from (the room with it). */
  clone(): MemoryFs {
    return new MemoryFs(structuredClone(this.root), this.now, this.roomBytes);
  }

  /** Bytes the regular files take. */
  usedBytes(node: MemNode = this.root): number {
    if (node.type === 'file') return node.data.byteLength;
    if (node.type !== 'dir') return 0;
    let n = 0;
    for (const c of node.children.values()) n += this.usedBytes(c);
    return n;
  }

  /**
   * Walks `path` from `cwd`, following symlinks in every parent and, when `follow`, in the last name.
   * The last name need not exist; its parent must be a directory.
   */
  find(path: string, opts: { cwd?: string; follow?: boolean } = {}): Found {
    const abs = path.startsWith('/') ? path : `${opts.cwd ?? '/'}/${path}`;
    return this.walk(split(abs), opts.follow ?? true, 0, path);
  }

  private walk(parts: string[], follow: boolean, links: number, orig: string): Found {
    let dir = this.root;
    const at: string[] = [];
    if (parts.length === 0) return { path: '/', parent: this.root, name: '', node: this.root };
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as string;
      const last = i === parts.length - 1;
      if (part === '..') {
        at.pop();
        dir = this.dirAt(at, orig);
        if (last) return { path: joinPath(at), parent: this.dirAt(at.slice(0, -1), orig), name: at.at(-1) ?? '', node: dir };
        continue;
      }
      const node = dir.children.get(part);
      if (node?.type === 'symlink' && (!last || follow)) {
        if (links >= MAX_LINKS) throw fsError('ELOOP', orig, `${orig}: too many levels of symbolic links`);
        const base = node.target.startsWith('/') ? [] : at;
        return this.walk([...base, ...split(node.target), ...parts.slice(i + 1)], follow, links + 1, orig);
      }
      if (last) return { path: joinPath([...at, part]), parent: dir, name: part, node };
      if (!node) throw fsError('ENOENT', orig);
      if (node.type !== 'dir') throw fsError('ENOTDIR', orig, `${orig}: not a directory`);
      dir = node;
      at.push(part);
    }
    throw new Error('unreachable');
  }

  private dirAt(parts: string[], orig: string): Extract<MemNode, { type: 'dir' }> {
    let dir = this.root;
    for (const p of parts) {
      const n = dir.children.get(p);
      if (n?.type !== 'dir') throw fsError('ENOENT', orig);
      dir = n;
    }
    return dir;
  }

  /** The node at path (symlinks followed); ENOENT when absent. */
  get(path: string, cwd?: string): MemNode {
    const f = this.find(path, { cwd });
    if (!f.node) throw fsError('ENOENT', path);
    return f.node;
  }

  readFile(path: string, cwd?: string): Uint8Array {
    const n = this.get(path, cwd);
    if (n.type === 'dir') throw fsError('EISDIR', path, `${path}: is a directory`);
    if (n.type === 'file') return n.data;
    return new Uint8Array(0);
  }

  /** Replaces the file whole (an atomic write: the new content appears at once). */
  writeFile(path: string, data: Uint8Array, opts: { cwd?: string; mode?: number; append?: boolean } = {}): void {
    const f = this.find(path, { cwd: opts.cwd });
    if (f.node?.type === 'null') return;
    if (f.node?.type === 'dir') throw fsError('EISDIR', path, `${path}: is a directory`);
    const old = f.node?.type === 'file' ? f.node.data : new Uint8Array(0);
    const body = opts.append ? concat([old, data]) : data;
    if (this.roomBytes !== undefined && this.usedBytes() - old.byteLength + body.byteLength > this.roomBytes) {
      throw fsError('ENOSPC', path, `${path}: No space left on device`);
    }
    const mode = opts.mode ?? (f.node?.type === 'file' ? f.node.mode : 0o644);
    f.parent.children.set(f.name, { type: 'file', mode, mtimeMs: this.now(), data: body });
    f.parent.mtimeMs = this.now();
    this.emit(f.node ? 'modify' : 'create', f.path, false);
  }

  /** Whether writes to path are discarded (a device such as /dev/null). */
  discards(path: string): boolean {
    try {
      return this.find(path).node?.type === 'null';
    } catch {
      return false;
    }
  }

  mkdir(path: string, opts: { parents?: boolean; cwd?: string } = {}): void {
    const abs = path.startsWith('/') ? path : `${opts.cwd ?? '/'}/${path}`;
    const parts = split(abs);
    for (let i = opts.parents ? 1 : parts.length; i <= parts.length; i++) {
      const sub = joinPath(parts.slice(0, i));
      const f = this.find(sub);
      if (f.node) {
        if (f.node.type === 'dir' && (opts.parents || i < parts.length)) continue;
        throw fsError('EEXIST', sub, `${sub}: already exists`);
      }
      f.parent.children.set(f.name, { type: 'dir', mode: 0o755, mtimeMs: this.now(), children: new Map() });
      this.emit('create', f.path, true);
    }
  }

  symlink(target: string, path: string, cwd?: string): void {
    const f = this.find(path, { cwd, follow: false });
    if (f.node) throw fsError('EEXIST', path, `${path}: already exists`);
    f.parent.children.set(f.name, { type: 'symlink', mode: 0o777, mtimeMs: this.now(), target });
    this.emit('create', f.path, false);
  }

  /** Removes a name (a symlink itself, not its target). */
  remove(path: string, opts: { recursive?: boolean; cwd?: string } = {}): void {
    const f = this.find(path, { cwd: opts.cwd, follow: false });
    if (!f.node) throw fsError('ENOENT', path);
    if (f.node === this.root) throw fsError('EINVAL', path, 'cannot remove /');
    if (f.node.type === 'dir' && f.node.children.size > 0 && !opts.recursive) throw fsError('ENOTEMPTY', path, `${path}: directory not empty`);
    f.parent.children.delete(f.name);
    this.emit('delete', f.path, f.node.type === 'dir');
  }

  /** rename(2): neither name followed; a directory replaces only an empty directory, never into itself. */
  rename(from: string, to: string): void {
    const a = this.find(from, { follow: false });
    if (!a.node) throw fsError('ENOENT', from);
    if (a.node === this.root || split(to).length === 0) throw new AppError('forbidden', 'rename of /', { details: { errno: 'EPERM', path: '/' } });
    const b = this.find(to, { follow: false });
    if (a.node === b.node) return;
    if (a.node.type === 'dir' && `${b.path}/`.startsWith(`${a.path}/`)) throw fsError('EINVAL', to, `${to}: inside ${from}`);
    if (b.node?.type === 'dir') {
      if (a.node.type !== 'dir') throw fsError('EISDIR', to, `${to}: is a directory`);
      if (b.node.children.size) throw fsError('ENOTEMPTY', to, `${to}: directory not empty`);
    } else if (b.node && a.node.type === 'dir') {
      throw fsError('ENOTDIR', to, `${to}: not a directory`);
    }
    a.parent.children.delete(a.name);
    b.parent.children.set(b.name, a.node);
    a.parent.mtimeMs = b.parent.mtimeMs = this.now();
    this.emit('move_from', a.path, a.node.type === 'dir');
    this.emit('move_to', b.path, a.node.type === 'dir');
  }

  /**
   * Canonical path, symlinks followed. As the agent does: from the first component that does not exist,
   * the rest is taken lexically with `..` folded (so the answer says where a write would land).
   */
  realpath(path: string): string {
    const parts = split(path);
    for (let i = parts.length; i >= 0; i--) {
      let f: Found;
      try {
        f = this.find(joinPath(parts.slice(0, i)));
      } catch (e) {
        if ((e as AppError).code === 'not_found') continue;
        throw e;
      }
      if (i < parts.length && f.node && f.node.type !== 'dir') throw fsError('ENOTDIR', path, `${path}: not a directory`);
      if (i < parts.length && !f.node) continue;
      const out = split(f.path);
      for (const p of parts.slice(i)) {
        if (p === '..') out.pop();
        else out.push(p);
      }
      return joinPath(out);
    }
    return '/';
  }

  stat(path: string): FileStat {
    const f = this.find(path);
    if (!f.node) throw fsError('ENOENT', path);
    return { path: f.path, ...entry(f.name || '/', f.node) };
  }

  list(path: string): FileEntry[] {
    const n = this.get(path);
    if (n.type !== 'dir') throw fsError('ENOTDIR', path, `${path}: not a directory`);
    return [...n.children].map(([name, c]) => entry(name, c)).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /** Bytes held in regular files (what a checkpoint writes, roughly). */
  bytes(): number {
    let total = 0;
    const visit = (n: MemNode) => {
      if (n.type === 'file') total += n.data.byteLength;
      else if (n.type === 'dir') for (const c of n.children.values()) visit(c);
    };
    visit(this.root);
    return total;
  }
}

function entry(name: string, n: MemNode): FileEntry {
  const type: FileType = n.type === 'null' ? 'other' : n.type;
  const size = n.type === 'file' ? n.data.byteLength : n.type === 'symlink' ? n.target.length : n.type === 'dir' ? 4096 : 0;
  return { name, type, size, mode: n.mode, mtimeMs: n.mtimeMs };
}

export function concat(parts: Uint8Array[]): Uint8Array {
  const total = parts.reduce((a, p) => a + p.byteLength, 0);
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return out;
}
