/**
 * Egress from inside real sandboxes: curl, git and pip use HTTP(S)_PROXY unchanged, through the agent's
 * loopback listener and the gate. Servers run on the host at 127.0.0.2 (not in NO_PROXY, so clients use the
 * proxy), and the loopback range is allowed for the test sessions with --egress-allow-cidr. Every server
 * counts its accepts: a refused host is shown to receive nothing.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttp, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttps } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Session } from '../../src/sdk/index.js';
import { gvisorMissing, hasCommand, skipReason } from '../helpers/env.js';
import { destroyGateServer, startGateServer, type GateServer } from '../gate/harness.js';

const HOST = '127.0.0.2';
const skip = skipReason('egress in sandboxes', gvisorMissing() ?? (hasCommand('openssl', ['version']) && hasCommand('git') && hasCommand('python3') ? undefined : 'openssl, git and python3 are needed on the host'));

interface Web {
  server: Server;
  port: number;
  accepts: number;
}

async function serve(server: Server): Promise<Web> {
  const w: Web = { server, port: 0, accepts: 0 };
  server.on('connection', () => w.accepts++);
  await new Promise<void>((done) => server.listen(0, HOST, done));
  w.port = (server.address() as AddressInfo).port;
  return w;
}

function sh(cmd: string, args: string[], cwd?: string): string {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** `git http-backend` (smart HTTP) as a CGI behind a node server. */
function gitBackend(root: string) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const u = new URL(req.url ?? '/', 'http://x');
    const cgi = spawn('git', ['http-backend'], {
      env: {
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: u.pathname,
        QUERY_STRING: u.search.slice(1),
        REQUEST_METHOD: req.method ?? 'GET',
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        PATH: process.env.PATH ?? '',
      },
    });
    req.pipe(cgi.stdin);
    let head: Buffer | null = Buffer.alloc(0);
    cgi.stdout.on('data', (d: Buffer) => {
      if (head === null) return void res.write(d);
      head = Buffer.concat([head, d]);
      const at = head.indexOf('\r\n\r\n');
      if (at < 0) return;
      let status = 200;
      for (const line of head.subarray(0, at).toString().split('\r\n')) {
        const i = line.indexOf(':');
        const k = line.slice(0, i).trim();
        const v = line.slice(i + 1).trim();
        if (k.toLowerCase() === 'status') status = Number(v.split(' ')[0]);
        else res.setHeader(k, v);
      }
      res.statusCode = status;
      res.write(head.subarray(at + 4));
      head = null;
    });
    cgi.stdout.on('end', () => res.end());
  };
}

describe.skipIf(skip)('egress from inside a gVisor session', () => {
  let s: GateServer;
  let dir = '';
  let web: Web;
  let tls: Web;
  let git: Web;
  let pypi: Web;
  let blocked: Web;
  let session: Session;
  let caPem = '';

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-egress-'));
    // A test CA and a server certificate for 127.0.0.2 signed by it.
    sh('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=Berth test CA'], dir);
    sh('openssl', ['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', `/CN=${HOST}`], dir);
    await writeFile(join(dir, 'ext.cnf'), `subjectAltName=IP:${HOST}\n`);
    sh('openssl', ['x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.pem', '-days', '1', '-extfile', 'ext.cnf'], dir);
    caPem = await readFile(join(dir, 'ca.pem'), 'utf8');
    // A bare git repository with one commit.
    sh('git', ['init', '-q', '-b', 'main', 'work'], dir);
    await writeFile(join(dir, 'work', 'README'), 'cloned through the gate\n');
    sh('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'init'], join(dir, 'work'));
    sh('git', ['add', 'README'], join(dir, 'work'));
    sh('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'readme'], join(dir, 'work'));
    sh('git', ['clone', '-q', '--bare', 'work', 'repo.git'], dir);
    // A wheel and a PEP 503 simple index for it.
    sh('python3', ['-c', `
import zipfile, hashlib, base64
files = {'berthdemo/__init__.py': 'GREETING = "installed through the gate"\\n',
         'berthdemo-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: berthdemo\\nVersion: 1.0\\n',
         'berthdemo-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}
rec = []
with zipfile.ZipFile('berthdemo-1.0-py3-none-any.whl', 'w') as z:
    for n, c in files.items():
        z.writestr(n, c)
        d = base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b'=').decode()
        rec.append(f'{n},sha256={d},{len(c.encode())}')
    rec.append('berthdemo-1.0.dist-info/RECORD,,')
    z.writestr('berthdemo-1.0.dist-info/RECORD', '\\n'.join(rec) + '\\n')
`], dir);
    const wheel = await readFile(join(dir, 'berthdemo-1.0-py3-none-any.whl'));

    web = await serve(createHttp((req, res) => res.end(`plain ${req.url}\n`)));
    tls = await serve(createHttps({ key: await readFile(join(dir, 'srv.key')), cert: await readFile(join(dir, 'srv.pem')) }, (req, res) => res.end(`tls ${req.url}\n`)) as unknown as Server);
    git = await serve(createHttp(gitBackend(dir)));
    pypi = await serve(
      createHttp((req, res) => {
        if (req.url === '/simple/berthdemo/') {
          res.setHeader('content-type', 'text/html');
          return res.end('<html><body><a href="/files/berthdemo-1.0-py3-none-any.whl">berthdemo-1.0-py3-none-any.whl</a></body></html>');
        }
        if (req.url === '/files/berthdemo-1.0-py3-none-any.whl') return res.end(wheel);
        res.statusCode = 404;
        res.end();
      }),
    );
    blocked = await serve(createHttp((_req, res) => res.end('must never be reached\n')));

    s = await startGateServer();
    session = await s.root.sessions.create({
      memoryMb: 512,
      egressAllow: [`${HOST}:${web.port}`, `${HOST}:${tls.port}`, `${HOST}:${git.port}`, `${HOST}:${pypi.port}`],
      egressAllowCidr: ['127.0.0.0/8'],
    });
    await session.files.write('/tmp/ca.pem', caPem);
  }, 600_000);
  afterAll(async () => {
    await destroyGateServer(s);
    for (const w of [web, tls, git, pypi, blocked]) w?.server.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('points HTTP(S)_PROXY at the sandbox loopback and has no network device', async () => {
    const r = await session.run(['sh', '-c', 'echo $HTTP_PROXY $HTTPS_PROXY $http_proxy $https_proxy $NO_PROXY; ls /sys/class/net']);
    const [env, ...devs] = r.stdout.trim().split('\n');
    expect(env).toBe('http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1');
    expect(devs.join(' ').split(/\s+/).filter((d) => d !== 'lo' && d !== '')).toEqual([]);
  });

  it('curl over HTTP and over HTTPS (TLS passes through: the test CA verifies the server)', async () => {
    expect((await session.run(['curl', '-sS', `http://${HOST}:${web.port}/a`])).stdout).toBe('plain /a\n');
    expect((await session.run(['curl', '-sS', '--cacert', '/tmp/ca.pem', `https://${HOST}:${tls.port}/b`])).stdout).toBe('tls /b\n');
  });

  it('refuses a host off the list with a 403 curl shows, and the host never receives a connection', async () => {
    const before = blocked.accepts;
    const r = await session.run(['curl', '-sS', '-i', `http://${HOST}:${blocked.port}/x`]);
    expect(r.stdout).toMatch(/^HTTP\/1\.1 403 /);
    expect(r.stdout).toContain(`--egress-allow ${HOST}:${blocked.port}`);
    const t = await session.run(['curl', '-sS', `https://${HOST}:${blocked.port}/x`]);
    expect(t.code).not.toBe(0);
    expect(t.stderr).toContain('403');
    expect(blocked.accepts).toBe(before);
  });

  it('git clone over smart HTTP', async () => {
    const r = await session.run(['sh', '-c', `git clone -q http://${HOST}:${git.port}/repo.git /tmp/repo && cat /tmp/repo/README`]);
    expect([r.code, r.stdout, r.stderr]).toEqual([0, 'cloned through the gate\n', '']);
  }, 180_000);

  it('pip install from a simple index', async () => {
    const r = await session.run([
      'sh',
      '-c',
      `python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --disable-pip-version-check --index-url http://${HOST}:${pypi.port}/simple/ berthdemo && /tmp/v/bin/python -c 'import berthdemo; print(berthdemo.GREETING)'`,
    ]);
    expect([r.code, r.stdout.trim()]).toEqual([0, 'installed through the gate']);
  }, 300_000);

  it('audits and meters the connections', async () => {
    const entries = (await s.root.audit.query({ sessionId: session.id, limit: 1000 })).filter((e) => e.action === 'egress.connect');
    expect(entries.some((e) => e.outcome === 'ok' && e.data.port === tls.port && (e.data.bytesIn as number) > 0)).toBe(true);
    expect(entries.some((e) => e.outcome === 'denied' && e.data.port === blocked.port && e.data.rule === 'allow-list')).toBe(true);
    await new Promise((r) => setTimeout(r, 1200)); // metering is flushed once a second
    const m = (await session.refresh()).metering;
    expect(m.egressConnections).toBeGreaterThanOrEqual(4);
    expect(m.egressRefused).toBeGreaterThanOrEqual(2);
    expect(m.egressBytesIn).toBeGreaterThan(1000);
  });

  it('keeps the proxy across hibernate and wake', async () => {
    await session.hibernate();
    await session.wake();
    expect((await session.run(['curl', '-sS', `http://${HOST}:${web.port}/again`])).stdout).toBe('plain /again\n');
  }, 300_000);
});

const skipQemu = skipReason('egress in a QEMU session', gvisorMissing() ?? (hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed'));

describe.skipIf(skipQemu)('egress from inside a QEMU session', () => {
  let s: GateServer;
  let web: Web;
  let blocked: Web;
  beforeAll(async () => {
    web = await serve(createHttp((req, res) => res.end(`plain ${req.url}\n`)));
    blocked = await serve(createHttp((_req, res) => res.end('must never be reached\n')));
    s = await startGateServer();
  }, 600_000);
  afterAll(async () => {
    await destroyGateServer(s);
    for (const w of [web, blocked]) w?.server.close();
  });

  it('curl through the same proxy; a refused host receives nothing', async () => {
    const q = await s.root.sessions.create({ backend: 'qemu', memoryMb: 256, egressAllow: [`${HOST}:${web.port}`], egressAllowCidr: ['127.0.0.0/8'] });
    expect((await q.run(['curl', '-sS', `http://${HOST}:${web.port}/q`])).stdout).toBe('plain /q\n');
    const r = await q.run(['curl', '-sS', '-i', `http://${HOST}:${blocked.port}/x`]);
    expect(r.stdout).toMatch(/^HTTP\/1\.1 403 /);
    expect(blocked.accepts).toBe(0);
  }, 600_000);
});
