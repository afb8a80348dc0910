/** The package's version, from the package.json above this file (a checkout or an installed package). */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

export function packageVersion(): string {
  if (cached) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'berth' && pkg.version) return (cached = pkg.version);
    }
    const up = dirname(dir);
    if (up === dir) return (cached = '0.0.0');
    dir = up;
  }
}
