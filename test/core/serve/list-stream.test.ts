import { expect } from 'chai';
import * as grpc from '@grpc/grpc-js';
import { LIST_STREAM_PAGE } from '../../../core/serve/api-server';
import type { Attachment } from '../../../proto/gen/workloadnet/v1/workload';
import { attachRequest } from '../../support/attach-request';
import { InProcessDaemon } from '../../support/in-process-daemon';
import { RecordingBackend } from '../../support/recording-backend';
import { StandInNamespaces } from '../../support/stand-in-netns';
import { waitUntil } from '../../support/wait-until';

// ListStream: the attachments List returns, one message each, read a page at a time and only as fast
// as the client takes them, so that a List of a large table does not cost the daemon the table.

describe('ListStream (recording backend, stand-in namespaces, no root needed)', function () {
  this.timeout(120_000);
  const namespaces = new StandInNamespaces();
  let d: InProcessDaemon;
  /** Pages the daemon has read for ListStream. */
  let pagesRead: number;

  before(async () => {
    const ns = namespaces.add().path;
    d = await InProcessDaemon.start(
      new RecordingBackend(),
      { podCidrs: ['10.81.0.0/20'] },
      { netns: namespaces },
    );
    // More than a few pages, and a last page that is not full.
    const count = LIST_STREAM_PAGE * 6 + 17;
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < count) {
          const i = next++;
          await d.client.call(d.client.raw.attach, attachRequest(`ls-${i}`, ns));
        }
      }),
    );
    const service = d.daemon.service;
    const listPage = service.listPage.bind(service);
    service.listPage = (after, limit) => {
      pagesRead++;
      return listPage(after, limit);
    };
  });
  beforeEach(() => (pagesRead = 0));
  after(async () => {
    await d.dispose();
    namespaces.cleanup();
  });

  const readAll = (stream: grpc.ClientReadableStream<Attachment>): Promise<Attachment[]> =>
    new Promise((resolve, reject) => {
      const got: Attachment[] = [];
      stream.on('data', (a: Attachment) => got.push(a));
      stream.on('error', reject);
      stream.on('end', () => resolve(got));
    });

  it('sends exactly the attachments List returns, in the same order, across pages', async () => {
    const listed = (await d.client.call(d.client.raw.list, {})).attachments;
    const streamed = await readAll(d.client.raw.listStream({}));
    expect(listed).to.have.length(LIST_STREAM_PAGE * 6 + 17);
    expect(streamed).to.deep.equal(listed);
    expect(pagesRead).to.equal(7);
  });

  it('reads the next page only once the client has taken the previous ones', async () => {
    const stream = d.client.raw.listStream({});
    let received = 0;
    stream.on('data', () => {
      received++;
      // The client stops reading after its first message: HTTP/2 flow control and the socket's
      // buffers then fill, and the daemon must stop reading pages.
      if (received === 1) stream.pause();
    });
    const ended = new Promise<void>((resolve, reject) => {
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    await waitUntil(() => received >= 1, 'the first message');
    // Give the daemon every chance to read on: it must not get to the end of the table.
    let stable = 0;
    let last = -1;
    while (stable < 5) {
      await new Promise((r) => setTimeout(r, 200));
      stable = pagesRead === last ? stable + 1 : 0;
      last = pagesRead;
    }
    expect(pagesRead, 'pages read while the client does not read').to.be.below(7);
    stream.resume();
    await ended;
    expect(received).to.equal(LIST_STREAM_PAGE * 6 + 17);
    expect(pagesRead).to.equal(7);
  });

  it('stops reading pages when the client cancels', async () => {
    const stream = d.client.raw.listStream({});
    stream.on('data', () => stream.pause());
    const failed = new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
    await waitUntil(() => pagesRead >= 1, 'a first page');
    stream.cancel();
    expect((await failed).code).to.equal(grpc.status.CANCELLED);
    const atCancel = pagesRead;
    await new Promise((r) => setTimeout(r, 1000));
    expect(pagesRead, 'pages read after the cancel').to.be.at.most(atCancel + 1);
    // The daemon still serves: a new stream gets everything.
    expect(await readAll(d.client.raw.listStream({}))).to.have.length(LIST_STREAM_PAGE * 6 + 17);
  });
});
