import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { isRoot, uniqueName } from './netns';
import { pings } from './ping';
import { programPath, requireProgram } from './system-program';

// A test machine without one of the tools must say which, not fail as if the network were broken.

describe('test support: system programs', () => {
  let savedPath: string | undefined;
  let dir: string;

  beforeEach(() => {
    savedPath = process.env.PATH;
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wnc-path-'));
  });
  afterEach(() => {
    process.env.PATH = savedPath;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('names a missing program and the Debian package that brings it', () => {
    process.env.PATH = dir;
    expect(() => requireProgram('etcdctl')).to.throw(/etcdctl is not installed.*etcd-client/);
    expect(() => requireProgram('/nonexistent/etcd')).to.throw(
      /\/nonexistent\/etcd is not installed.*etcd-server/,
    );
  });

  it('finds a program that is on PATH, and only an executable file', () => {
    const file = path.join(dir, 'ping');
    fs.writeFileSync(file, '#!/bin/sh\n', { mode: 0o644 });
    process.env.PATH = dir;
    expect(programPath('ping'), 'not executable').to.equal(undefined);
    fs.chmodSync(file, 0o755);
    expect(programPath('ping')).to.equal(file);
  });

  it('ping: a missing ping is reported by name, not as an unreachable peer', async () => {
    process.env.PATH = dir;
    let err: Error | undefined;
    await pings('any-namespace', '127.0.0.1').catch((e: Error) => (err = e));
    expect(err?.message).to.match(/ping is not installed.*iputils-ping/);
  });

  (isRoot ? it : it.skip)(
    'ping: a namespace that cannot be entered is an error, not "unreachable" (needs root)',
    async () => {
      let err: Error | undefined;
      await pings(uniqueName('wnc-nope'), '127.0.0.1').catch((e: Error) => (err = e));
      expect(err?.message).to.match(/failed \(255\)/);
    },
  );
});
