import { BinaryWriter } from '@bufbuild/protobuf/wire';
import {
  Attachment as ProtoAttachmentCodec,
  ListResponse,
  WorkloadNetworkingService,
} from '../../proto/gen/workloadnet/v1/workload';
import type { Attachment } from '../workload-service';
import { toProtoAttachment } from './api-messages';

// List's answer encoded as its rows are read. Its own file because it replaces grpc-js's serializer
// for one method, a memory measure that the server (api-server.ts) only installs.

/**
 * A List of thousands of attachments built as objects first (every row decoded, turned into a protobuf
 * object, then encoded) held all of them at once and left tens of MiB of garbage per call; the daemon's
 * memory peaked after a few Lists. So each attachment is encoded as its row is read, into one writer,
 * and the encoded bytes are what the handler returns: the List method's serializer passes them
 * through. Clients see the same ListResponse on the wire.
 */
export const LIST_SERVICE = {
  ...WorkloadNetworkingService,
  list: {
    ...WorkloadNetworkingService.list,
    responseSerialize: (value: ListResponse | EncodedList): Buffer =>
      value instanceof Uint8Array
        ? Buffer.from(value.buffer, value.byteOffset, value.byteLength)
        : Buffer.from(ListResponse.encode(value).finish()),
  },
} as const;

/** ListResponse bytes; typed as a ListResponse for the handler, which grpc-js passes on untouched. */
export type EncodedList = Uint8Array & ListResponse;

export function encodeList(atts: Iterable<Attachment>): EncodedList {
  const w = new BinaryWriter();
  // ListResponse.attachments is field 1, length-delimited: what ListResponse.encode writes per entry.
  for (const att of atts) ProtoAttachmentCodec.encode(toProtoAttachment(att), w.uint32(10).fork()).join();
  return w.finish() as EncodedList;
}
