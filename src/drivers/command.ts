import { execFile } from 'node:child_process';

/**
 * Whether a host command is installed: `command -v` in /bin/sh (a builtin: the executable a spawn would run,
 * found on the inherited PATH, or the path given). A driver's probe asks this at every start instead of
 * running `qemu-system-x86_64 --version`, which took 140-230 ms on a loaded 2-core host (a large binary and
 * its shared libraries), time a restart waits for. A command that is there but broken fails at the first
 * sandbox, with its own error.
 */
export function commandInstalled(bin: string): Promise<boolean> {
  return new Promise((done) => {
    execFile('/bin/sh', ['-c', 'p=$(command -v "$1") && [ -f "$p" ] && [ -x "$p" ]', 'sh', bin], { timeout: 30_000 }, (err) => done(!err));
  });
}
