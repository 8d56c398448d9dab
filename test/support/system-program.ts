import * as fs from 'node:fs';
import * as path from 'node:path';

// The system programs the suites run, and the Debian package each comes from (the packages are listed in
// packaging/test-packages.txt, which npm test's pretest step installs). A program started through
// `ip netns exec NS PROGRAM` that is not installed makes `ip` fail with a message on a stream the caller
// may not read, and a helper that turns any failure into a verdict ("unreachable") then reports the wrong
// thing. So helpers ask for the program by name first, and a missing one stops the test saying which.

const PACKAGE_OF: Readonly<Record<string, string>> = {
  ip: 'iproute2',
  tc: 'iproute2',
  ping: 'iputils-ping',
  containerd: 'containerd',
  runc: 'runc',
  etcd: 'etcd-server',
  etcdctl: 'etcd-client',
  iptables: 'iptables',
  'iptables-save': 'iptables',
  openssl: 'openssl',
  gcc: 'gcc',
};

/** Where `program` (a name looked up on PATH, or a path) is, or undefined. */
export function programPath(program: string): string | undefined {
  // The same look-up execFile and `ip netns exec` make: PATH, as the test process has it.
  const dirs = program.includes('/') ? [''] : (process.env.PATH ?? '').split(':');
  for (const dir of dirs) {
    if (dir === '' && !program.includes('/')) continue;
    const file = path.join(dir, program);
    try {
      fs.accessSync(file, fs.constants.X_OK);
      if (!fs.statSync(file).isFile()) continue;
      return file;
    } catch {
      // Not in this directory: look in the next.
    }
  }
  return undefined;
}

/** Throws an error naming `program` (and its Debian package) when it is not installed. */
export function requireProgram(program: string): void {
  if (programPath(program) !== undefined) return;
  const pkg = PACKAGE_OF[path.basename(program)];
  throw new Error(
    `${program} is not installed, and the test needs it` +
      (pkg
        ? ` (Debian package ${pkg}, listed in packaging/test-packages.txt: ` +
          `run "sh packaging/ensure-test-packages.sh" as root, or apt-get install -y ${pkg})`
        : ''),
  );
}
