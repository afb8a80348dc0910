#!/usr/bin/env node
// Makes this checkout ready to run: Debian packages (as root, through apt-get), npm packages, and the
// build (TypeScript → dist/, the static in-sandbox agent). Idempotent and quick when nothing is missing,
// so `npm start`, `npm test` and `npm run bench` all begin with it.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const quiet = process.argv.includes('--quiet');
const say = (m) => quiet || console.error(`[setup] ${m}`);

// Debian packages: the sandbox engines, the image build tools, and the agent's compiler.
const DEBIAN = {
  runsc: 'gVisor runtime (the default backend)',
  'qemu-system-x86': 'QEMU (the microVM backend)',
  'qemu-utils': 'qemu-img, for copy-on-write disk layers',
  debootstrap: 'builds the Debian base image',
  'busybox-static': 'the microVM initramfs',
  e2fsprogs: 'mkfs.ext4 for the microVM disk',
  gcc: 'compiles the in-sandbox agent',
  'libc6-dev': 'static libc for the agent',
};

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: quiet ? ['ignore', 'ignore', 'inherit'] : 'inherit', cwd: root, ...opts });
  if (r.error) throw r.error;
  return r.status ?? 1;
}

function missingDebian() {
  return Object.keys(DEBIAN).filter((p) => {
    const r = spawnSync('dpkg-query', ['-W', '-f=${Status}', p], { encoding: 'utf8' });
    return !(r.status === 0 && r.stdout.includes('install ok installed'));
  });
}

const major = Number(process.versions.node.split('.')[0]);
if (major < 20) {
  console.error(`berth needs Node.js 20 or newer; this is ${process.versions.node}`);
  process.exit(1);
}

const missing = missingDebian();
if (missing.length) {
  if (process.getuid?.() === 0) {
    say(`installing Debian packages: ${missing.map((p) => `${p} (${DEBIAN[p]})`).join(', ')}`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    if (run('apt-get', ['update', '-qq'], { env }) !== 0) process.exit(1);
    if (run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], { env }) !== 0) process.exit(1);
  } else {
    console.error(`[setup] missing Debian packages; as root run:\n  apt-get update && apt-get install -y ${missing.join(' ')}`);
  }
}

const lock = join(root, 'package-lock.json');
const stamp = join(root, 'node_modules', '.package-lock.json');
if (!existsSync(stamp) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(stamp).mtimeMs)) {
  say('installing npm packages');
  if (run('npm', existsSync(lock) ? ['ci', '--no-audit', '--no-fund'] : ['install', '--no-audit', '--no-fund']) !== 0) process.exit(1);
}

say('building');
if (run('npm', ['run', '--silent', 'build']) !== 0) process.exit(1);
