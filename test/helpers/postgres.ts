/**
 * A private PostgreSQL cluster for tests: initdb into a temporary directory (as the `postgres` OS user,
 * since the server refuses to run as root), listening on 127.0.0.1 at a free port and on a socket in that
 * directory only, stopped and removed by stop(). Each test gets its own database from newDatabase().
 * postgresMissing() says why a machine cannot run it (Debian's postgresql 15, installed by scripts/setup.mjs).
 */
import { execFile, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);
export const PG_BIN = '/usr/lib/postgresql/15/bin';
const USER = 'berth';

export function postgresMissing(): string | undefined {
  if (!existsSync(join(PG_BIN, 'initdb'))) return `PostgreSQL 15 is not installed (${PG_BIN}/initdb missing: apt-get install postgresql-15)`;
  if (process.getuid?.() !== 0) return 'the PostgreSQL tests start their cluster as the postgres user, which needs root';
  if (spawnSync('id', ['-u', 'postgres'], { stdio: 'ignore' }).status !== 0) return 'there is no postgres OS user';
  return undefined;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

function asPostgres(cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run('runuser', ['-u', 'postgres', '--', join(PG_BIN, cmd), ...args], { timeout: 120_000 });
}

export interface PgCluster {
  /** Superuser URL of the `postgres` database. */
  adminUrl: string;
  port: number;
  /** A fresh, empty database; returns its URL. */
  newDatabase(): Promise<string>;
  /** Stops the server (fast shutdown) and removes its directory. Idempotent. */
  stop(): Promise<void>;
}

let dbCounter = 0;

export async function startPostgres(): Promise<PgCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-pg-'));
  const pgUid = Number(spawnSync('id', ['-u', 'postgres']).stdout.toString().trim());
  const pgGid = Number(spawnSync('id', ['-g', 'postgres']).stdout.toString().trim());
  chownSync(dir, pgUid, pgGid);
  const data = join(dir, 'data');
  const port = await freePort();
  const opts = `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=on -c synchronous_commit=on`;
  await asPostgres('initdb', ['-D', data, '-U', USER, '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C']);
  await asPostgres('pg_ctl', ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
  let stopped = false;
  const adminUrl = `postgres://${USER}@127.0.0.1:${port}/postgres`;
  const cleanup = () => {
    if (!stopped) spawnSync('runuser', ['-u', 'postgres', '--', join(PG_BIN, 'pg_ctl'), '-D', data, '-m', 'immediate', 'stop'], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', cleanup);
  return {
    adminUrl,
    port,
    async newDatabase() {
      const name = `berth_t${process.pid}_${++dbCounter}`;
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${name}`);
      } finally {
        await c.end();
      }
      return `postgres://${USER}@127.0.0.1:${port}/${name}`;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      process.removeListener('exit', cleanup);
      await asPostgres('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
