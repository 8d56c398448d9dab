import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { gzipSync } from 'node:zlib';
import { run } from './exec';
import { supportFile } from './support-files';

// The sandbox ("pause") image, built offline: nothing can be pulled from a registry here. It is an OCI
// image layout written by hand around one static binary, so it needs only gcc and tar.

/**
 * The name containerd's CRI plugin is configured with. The `localhost/` prefix matters: a bare name is
 * read as docker.io/… and containerd would try to pull it.
 */
export const PAUSE_IMAGE_NAME = 'localhost/workloadnet-pause:1.0';

/** Bump when the image layout below changes, so cached tars built the old way are not reused. */
const LAYOUT_VERSION = '1';

export const DEFAULT_IMAGE_CACHE_DIR = path.join(os.tmpdir(), 'workloadnet-e2e-cache');

/** Options GNU tar needs to produce byte-identical archives from the same files. */
const DETERMINISTIC_TAR = [
  '--sort=name',
  '--owner=0',
  '--group=0',
  '--numeric-owner',
  '--mtime=@0',
  '--format=gnu',
];

const OCI_ARCH: Partial<Record<NodeJS.Architecture, string>> = { x64: 'amd64', arm64: 'arm64' };

/**
 * Returns the path of an `ctr images import`-able tar of the pause image, building it into `cacheDir`
 * unless a build from the same source is already there. Concurrent callers are safe: each builds in its
 * own folder and the finished tar appears by an atomic rename.
 */
export async function buildPauseImage(cacheDir: string = DEFAULT_IMAGE_CACHE_DIR): Promise<string> {
  const source = await readFile(supportFile('pause.c'));
  const arch = OCI_ARCH[process.arch];
  if (!arch) throw new Error(`no OCI architecture name known for ${process.arch}`);
  const key = createHash('sha256')
    .update(LAYOUT_VERSION)
    .update(arch)
    .update(source)
    .digest('hex')
    .slice(0, 16);
  const tarPath = path.join(cacheDir, `workloadnet-pause-${key}.tar`);
  if (existsSync(tarPath)) return tarPath;

  await mkdir(cacheDir, { recursive: true });
  const work = await mkdtemp(path.join(cacheDir, 'build-'));
  try {
    const layer = await buildRootfsLayer(work);
    const layout = path.join(work, 'layout');
    await writeOciLayout(layout, layer, arch);
    const partial = path.join(work, 'image.tar');
    await run('tar', [
      ...DETERMINISTIC_TAR,
      '-C',
      layout,
      '-cf',
      partial,
      'blobs',
      'index.json',
      'oci-layout',
    ]);
    await rename(partial, tarPath);
    return tarPath;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

interface Layer {
  /** The uncompressed tar (its digest is the config's diff_id). */
  tar: Buffer;
  /** The gzip-compressed blob the manifest points at. */
  gz: Buffer;
}

async function buildRootfsLayer(work: string): Promise<Layer> {
  const rootfs = path.join(work, 'rootfs');
  await mkdir(rootfs);
  const binary = path.join(rootfs, 'pause');
  await run('gcc', ['-static', '-Os', '-s', '-o', binary, supportFile('pause.c')]);
  await chmod(binary, 0o755);
  const tarFile = path.join(work, 'layer.tar');
  await run('tar', [...DETERMINISTIC_TAR, '-C', rootfs, '-cf', tarFile, 'pause']);
  const tar = await readFile(tarFile);
  // zlib writes a zero mtime and a fixed OS byte in the gzip header, so this is deterministic too.
  return { tar, gz: gzipSync(tar, { level: 9 }) };
}

const sha256 = (data: Buffer | string): string => createHash('sha256').update(data).digest('hex');

async function writeOciLayout(layout: string, layer: Layer, arch: string): Promise<void> {
  const blobs = path.join(layout, 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  const putBlob = async (data: Buffer | string): Promise<{ digest: string; size: number }> => {
    const hex = sha256(data);
    await writeFile(path.join(blobs, hex), data);
    return { digest: `sha256:${hex}`, size: Buffer.byteLength(data) };
  };

  const layerBlob = await putBlob(layer.gz);
  const config = await putBlob(
    JSON.stringify({
      architecture: arch,
      os: 'linux',
      // 65535 is the conventional unprivileged user of pause images; the process needs no rights.
      config: { Entrypoint: ['/pause'], User: '65535:65535', WorkingDir: '/' },
      rootfs: { type: 'layers', diff_ids: [`sha256:${sha256(layer.tar)}`] },
    }),
  );
  const manifest = await putBlob(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...layerBlob }],
    }),
  );
  const tag = PAUSE_IMAGE_NAME.slice(PAUSE_IMAGE_NAME.lastIndexOf(':') + 1);
  await writeFile(
    path.join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          ...manifest,
          platform: { architecture: arch, os: 'linux' },
          annotations: {
            // ctr import names the image after this annotation (otherwise it needs --index-name).
            'io.containerd.image.name': PAUSE_IMAGE_NAME,
            'org.opencontainers.image.ref.name': tag,
          },
        },
      ],
    }),
  );
  await writeFile(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
}
