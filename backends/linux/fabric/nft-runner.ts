// How the fabric runs nft: one script on stdin, in the host namespace (through nsenter, as a spawned
// child cannot be moved by setns), with errors a person can act on (a missing binary names its
// Debian package).

import { spawn } from 'node:child_process';

/** How nft is run: the command, and the namespace to run it in (a path; empty: our own). */
export interface NftRunnerOptions {
  /** The nft binary (default `nft`, found on PATH). */
  command?: string;
  netnsPath?: string;
}

/** Runs one nft script (read from stdin) and returns what nft printed. */
export type NftRunner = (script: string, flags?: readonly string[]) => Promise<string>;

export class NftError extends Error {}

/** nft, in the given namespace (through nsenter, as a spawned child cannot be moved by setns). */
export function nftRunner(opts: NftRunnerOptions = {}): NftRunner {
  const nft = opts.command ?? 'nft';
  const own = opts.netnsPath === undefined || opts.netnsPath === '';
  const file = own ? nft : 'nsenter';
  return (script, flags = []) =>
    new Promise((resolve, reject) => {
      const args = [...flags, '-f', '-'];
      const child = spawn(file, own ? args : [`--net=${opts.netnsPath}`, '--', nft, ...args], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
      child.on('error', (e: NodeJS.ErrnoException) =>
        reject(
          new NftError(
            e.code === 'ENOENT'
              ? `${file} is not installed (Debian package ${file === 'nsenter' ? 'util-linux' : 'nftables'})`
              : `${file}: ${e.message}`,
          ),
        ),
      );
      child.on('close', (code) => {
        if (code === 0) resolve(out);
        else {
          const text = err.trim().split('\n').slice(0, 3).join(' ') || `exit code ${String(code)}`;
          // nsenter names the program it could not run; say it as plainly as a missing nft.
          if (/nsenter: failed to execute .*No such file/.test(text))
            reject(new NftError(`${nft} is not installed (Debian package nftables)`));
          else reject(new NftError(`nft: ${text}`));
        }
      });
      child.stdin.on('error', () => undefined);
      child.stdin.end(script);
    });
}
