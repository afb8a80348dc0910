import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { open, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { SandboxError, UnavailableError } from '../../core/index.js';

/**
 * The guest kernel's side of the image build: resolving and fetching a Debian kernel package with apt,
 * unpacking it, turning its bzImage into an ELF the hypervisor can start directly, and finding the modules
 * a guest must load (with their dependencies, in load order).
 */

/** A kernel package as apt resolved it; stored in the cache so later builds of the recipe stay on it. */
export interface KernelPin {
  /** The versioned binary package, e.g. linux-image-6.1.0-57-amd64. */
  package: string;
  /** Its Debian version, e.g. 6.1.192-3. */
  version: string;
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion, collecting its output (bounded); never throws for a non-zero exit. */
export function runCommand(cmd: string, args: readonly string[], opts: { cwd?: string } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b: Buffer) => (stdout = (stdout + b.toString()).slice(-1_000_000)));
    p.stderr.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-20_000)));
    p.on('error', (e) => reject(new UnavailableError(`${cmd} could not be started: ${e.message}`, { cause: e })));
    p.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

async function runOk(cmd: string, args: readonly string[], opts: { cwd?: string } = {}): Promise<string> {
  const r = await runCommand(cmd, args, opts);
  if (r.code !== 0) throw new SandboxError(`${cmd} ${args.join(' ')} exited with ${r.code}: ${tail(r.stderr || r.stdout)}`);
  return r.stdout;
}

function tail(s: string): string {
  return s.trim().split('\n').slice(-4).join(' | ');
}

/**
 * Resolves a kernel metapackage (e.g. linux-image-amd64) to the versioned package it depends on, from
 * apt's local package lists (no network). Returns undefined when the lists do not know it.
 */
async function resolveFromLists(metapackage: string): Promise<KernelPin | undefined> {
  const r = await runCommand('apt-cache', ['show', '--no-all-versions', metapackage]);
  if (r.code !== 0) return undefined;
  const depends = /^Depends:\s*(.+)$/m.exec(r.stdout)?.[1];
  const first = depends?.split(',')[0]?.trim();
  const m = first ? /^([a-z0-9][a-z0-9.+-]*)(?:\s*\(\s*=\s*([^)\s]+)\s*\))?/.exec(first) : null;
  if (!m?.[1]) return undefined;
  const pkg = m[1];
  let version = m[2];
  if (!version) {
    const s = await runCommand('apt-cache', ['show', '--no-all-versions', pkg]);
    version = /^Version:\s*(\S+)$/m.exec(s.stdout)?.[1];
  }
  return version ? { package: pkg, version } : undefined;
}

/**
 * Fetches the .deb of `pin` (or, without one, of what `metapackage` resolves to now) into `dir` with
 * `apt-get download`: the only network this build uses is the Debian mirror apt is configured with.
 * Runs `apt-get update` once, and only when resolving or downloading fails with the lists at hand.
 */
export async function downloadKernel(opts: {
  metapackage: string;
  pin?: KernelPin;
  dir: string;
  log?: (line: string) => void;
}): Promise<{ pin: KernelPin; deb: string }> {
  let updated = false;
  const update = async () => {
    opts.log?.('apt-get update (package lists missing or stale)');
    const u = await runCommand('apt-get', ['update', '-qq']);
    if (u.code !== 0) throw new UnavailableError(`apt-get update failed (run it as root?): ${tail(u.stderr)}`);
    updated = true;
  };
  for (;;) {
    const pin = opts.pin ?? (await resolveFromLists(opts.metapackage));
    if (!pin) {
      if (updated) throw new UnavailableError(`apt does not know the package ${opts.metapackage}`);
      await update();
      continue;
    }
    const r = await runCommand('apt-get', ['download', '-q', `${pin.package}=${pin.version}`], { cwd: opts.dir });
    const deb = (await readdir(opts.dir)).find((f) => f.startsWith(`${pin.package}_`) && f.endsWith('.deb'));
    if (r.code === 0 && deb) return { pin, deb: join(opts.dir, deb) };
    if (updated) {
      throw new UnavailableError(`apt-get download ${pin.package}=${pin.version} failed: ${tail(r.stderr)}`);
    }
    await update();
  }
}

/** Unpacks a .deb's files into dir (dpkg-deb -x: no maintainer scripts, no root needed). */
export async function extractDeb(deb: string, dir: string): Promise<void> {
  await runOk('dpkg-deb', ['-x', deb, dir]);
}

/**
 * Turns an x86 bzImage into the uncompressed ELF vmlinux inside it. QEMU starts such an ELF through its
 * PVH entry point, which skips the kernel's self-decompression: for Debian's xz-compressed generic kernel
 * that is about 4 s of emulated CPU under TCG, more than the rest of the boot. Returns false when the
 * payload's compression is not one this host can undo (the caller then boots the bzImage as it is).
 */
export async function extractVmlinux(bzImage: string, out: string): Promise<boolean> {
  const img = await readFile(bzImage);
  // Boot protocol (Documentation/arch/x86/boot.rst): "HdrS" at 0x202, setup_sects at 0x1f1, and since
  // 2.08 payload_offset/payload_length at 0x248/0x24c, relative to the protected-mode code.
  if (img.length < 0x250 || img.toString('latin1', 0x202, 0x206) !== 'HdrS' || img.readUInt16LE(0x206) < 0x208) return false;
  const setupSects = img[0x1f1] || 4;
  const start = (setupSects + 1) * 512 + img.readUInt32LE(0x248);
  const payload = img.subarray(start, start + img.readUInt32LE(0x24c));
  const magic = payload.subarray(0, 6);
  let tool: string[] | undefined;
  if (magic[0] === 0x1f && magic[1] === 0x8b) {
    try {
      await writeAll(out, gunzipSync(payload));
    } catch {
      return false;
    }
    return isElf(out);
  } else if (magic.equals(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]))) tool = ['xz', '-dc', '--single-stream'];
  else if (magic.readUInt32LE(0) === 0xfd2fb528) tool = ['zstd', '-dc'];
  else if (magic.readUInt32LE(0) === 0x184c2102) tool = ['lz4', '-dc'];
  if (!tool) return false;
  const ok = await pipeThrough(tool, payload, out);
  return ok && (await isElf(out));
}

async function writeAll(path: string, data: Uint8Array): Promise<void> {
  const fh = await open(path, 'w');
  try {
    await fh.writeFile(data);
  } finally {
    await fh.close();
  }
}

async function isElf(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const b = Buffer.alloc(4);
    await fh.read(b, 0, 4, 0);
    return b.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]));
  } finally {
    await fh.close();
  }
}

/** Pipes input through a decompressor into out; true when it wrote something (the caller checks what). */
function pipeThrough(tool: string[], input: Uint8Array, out: string): Promise<boolean> {
  return new Promise((resolve) => {
    const [cmd, ...args] = tool as [string, ...string[]];
    const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'ignore'] });
    const ws = createWriteStream(out);
    let exited: number | null | undefined;
    let flushed = false;
    // xz, told --single-stream, ignores the 4-byte size the kernel build appends after the stream; lz4
    // and zstd complain about it (non-zero exit) after writing everything, so their exit code is not
    // trusted and the ELF check decides.
    const done = () => exited !== undefined && flushed && resolve(cmd !== 'xz' || exited === 0);
    p.on('error', () => resolve(false));
    p.stdout.pipe(ws);
    p.stdin.on('error', () => undefined); // the decompressor may stop reading at the end of its stream
    p.stdin.end(input);
    p.on('close', (c) => ((exited = c), done()));
    ws.on('close', () => ((flushed = true), done()));
  });
}

/** Reads the NUL-separated key=value strings of a kernel module's .modinfo ELF section. */
export function modinfo(ko: Uint8Array): Map<string, string[]> {
  const b = Buffer.from(ko.buffer, ko.byteOffset, ko.length);
  if (b.readUInt32BE(0) !== 0x7f454c46 || b[4] !== 2 || b[5] !== 1) throw new SandboxError('not a little-endian ELF64 module');
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const shstrndx = b.readUInt16LE(0x3e);
  const sect = (i: number) => {
    const o = shoff + i * shentsize;
    return { name: b.readUInt32LE(o), offset: Number(b.readBigUInt64LE(o + 0x18)), size: Number(b.readBigUInt64LE(o + 0x20)) };
  };
  const strtab = sect(shstrndx);
  const out = new Map<string, string[]>();
  for (let i = 0; i < shnum; i++) {
    const s = sect(i);
    const nameEnd = b.indexOf(0, strtab.offset + s.name);
    if (b.toString('latin1', strtab.offset + s.name, nameEnd) !== '.modinfo') continue;
    for (const item of b.toString('latin1', s.offset, s.offset + s.size).split('\0')) {
      const eq = item.indexOf('=');
      if (eq <= 0) continue;
      const k = item.slice(0, eq);
      out.set(k, [...(out.get(k) ?? []), item.slice(eq + 1)]);
    }
  }
  return out;
}

const norm = (name: string) => name.replace(/-/g, '_');

/**
 * The .ko files (paths relative to modulesDir) needed to load `wanted`, dependencies first. Modules
 * built into the kernel (modules.builtin) are skipped; an unknown name throws.
 */
export async function moduleLoadOrder(modulesDir: string, wanted: readonly string[]): Promise<string[]> {
  const builtin = new Set(
    (await readFile(join(modulesDir, 'modules.builtin'), 'utf8').catch(() => ''))
      .split('\n')
      .filter(Boolean)
      .map((p) => norm(p.replace(/^.*\//, '').replace(/\.ko$/, ''))),
  );
  const files = new Map<string, string>();
  const walk = async (rel: string) => {
    for (const e of await readdir(join(modulesDir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(p);
      else if (e.name.endsWith('.ko')) files.set(norm(e.name.slice(0, -3)), p);
    }
  };
  await walk('kernel');
  const order: string[] = [];
  const seen = new Set<string>();
  const visit = async (name: string, chain: string[]) => {
    const n = norm(name);
    if (seen.has(n) || builtin.has(n)) return;
    if (chain.includes(n)) throw new SandboxError(`module dependency cycle: ${[...chain, n].join(' -> ')}`);
    const file = files.get(n);
    if (!file) throw new SandboxError(`kernel module ${name} not found under ${modulesDir}`);
    const info = modinfo(await readFile(join(modulesDir, file)));
    for (const dep of (info.get('depends')?.[0] ?? '').split(',').filter(Boolean)) await visit(dep, [...chain, n]);
    seen.add(n);
    order.push(file);
  };
  for (const w of wanted) await visit(w, []);
  return order;
}
