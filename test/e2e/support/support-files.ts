import { existsSync } from 'node:fs';
import * as path from 'node:path';

// tsc emits only the TypeScript into dist/, so the non-TypeScript files of this folder (the pause
// program's C source, the CRI proto) are read from the source tree, wherever the code runs from.

const SOURCE_DIR_FROM_DIST = path.resolve(__dirname, '../../../../test/e2e/support');

/** Absolute path of a file that lives beside this module in test/e2e/support/. */
export function supportFile(name: string): string {
  for (const dir of [__dirname, SOURCE_DIR_FROM_DIST]) {
    const candidate = path.join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  throw new Error(`test/e2e/support/${name} not found beside ${__dirname} or in ${SOURCE_DIR_FROM_DIST}`);
}
