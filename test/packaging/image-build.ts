import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { isRoot } from '../support/netns';
import { programPath } from '../support/system-program';
import { ROOT } from './daemonset-podman';

// The image `npm run image` builds (packaging/image/build.sh), built for the tests that run it, and
// why they are skipped where it cannot be built or run.

const BUILD = path.join(ROOT, 'packaging', 'image', 'build.sh');
const NEEDED: Record<string, string> = {
  podman: 'podman',
  mmdebstrap: 'mmdebstrap',
  runc: 'runc',
  strip: 'binutils',
};

/** ' (skipped: …)' for a suite's name where the image cannot be built or run here; '' where it can. */
export function imageSkipReason(): string {
  const missing = Object.keys(NEEDED).filter((p) => programPath(p) === undefined);
  if (!isRoot) return ' (skipped: needs root)';
  if (missing.length > 0)
    return ` (skipped: ${missing.map((p) => `${p}, Debian package ${NEEDED[p]}`).join('; ')} not installed)`;
  return '';
}

export interface Built {
  /** The image's name and tag in podman's store. */
  image: string;
  /** The digest of its one layer. */
  layer: string;
  /** What the build said. */
  log: string;
}

/**
 * Runs the image build on dist/ as npm test built it, writing the layer's tar to `out`; the Debian
 * root file system comes from its cache (a first build makes it: a few minutes).
 */
export function buildImage(out: string): Promise<Built> {
  return new Promise((resolve, reject) =>
    execFile(
      'sh',
      [BUILD, '--no-build', '--out', out],
      { cwd: ROOT, encoding: 'utf8', timeout: 20 * 60_000, maxBuffer: 64 << 20 },
      (err, stdout, stderr) => {
        if (err)
          return reject(new Error(`image build failed (${err.code ?? err.signal}):\n${stderr.slice(-4000)}`));
        const image = stdout.trim().split('\n').pop() ?? '';
        const layer = /layer sha256:([0-9a-f]{64})/.exec(stderr)?.[1] ?? '';
        resolve({ image, layer, log: stderr });
      },
    ),
  );
}
