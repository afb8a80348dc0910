import type { Reporter, TestModule } from 'vitest/node';
import { isCi } from './env.js';

/**
 * Ends the run with one plain line, `tests: N passed, N failed, N skipped`, that any CI can read. On CI
 * (`CI=true`) a skipped test fails the run: every suite here runs real components, and a CI run that
 * skipped them would pass without having tested them.
 */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    const skipped: string[] = [];
    for (const m of modules) {
      for (const t of m.children.allTests()) {
        const s = t.result().state;
        if (s === 'passed') passed++;
        else if (s === 'failed') failed++;
        else skipped.push(`${m.relativeModuleId} > ${t.fullName}`);
      }
      if (m.state() === 'failed' && [...m.children.allTests()].length === 0) failed++;
    }
    process.stdout.write(`\ntests: ${passed} passed, ${failed} failed, ${skipped.length} skipped\n`);
    if (isCi() && skipped.length > 0) {
      process.stdout.write(`CI=true: ${skipped.length} skipped tests fail the run:\n${skipped.map((s) => `  - ${s}`).join('\n')}\n`);
      process.exitCode = 1;
    }
  }
}
