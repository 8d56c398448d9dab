import { spawn, type ChildProcess } from 'node:child_process';

// Servers a test runs in its namespaces: small node programs, each up once it prints its first line,
// all killed together when the test is done.

export class NetnsServers {
  private readonly running: ChildProcess[] = [];

  /** Runs `code` with node in `netns`: up once it prints, a failure with its stderr if it exits first. */
  protected async run(netns: string, code: string, what: string): Promise<void> {
    const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', code], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.running.push(child);
    let err = '';
    child.stderr?.on('data', (c: Buffer) => (err += c.toString()));
    await new Promise<void>((resolve, reject) => {
      child.stdout?.once('data', () => resolve());
      child.once('exit', (c) => reject(new Error(`${what} exited with ${c}: ${err}`)));
    });
  }

  stopAll(): void {
    for (const c of this.running.splice(0)) c.kill('SIGKILL');
  }
}
