import { Writable } from 'node:stream';

/** Where a test's logger writes: the lines it logged, and how many bytes. */
export class LogSink extends Writable {
  bytes = 0;
  readonly lines: string[] = [];
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.bytes += chunk.length;
    this.lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    done();
  }
}
