import type { AttachmentRecord } from '../../core/store/attachment-record';

/** A stored attachment for store tests: key "<workload>/<ifname>", one IPv4 address per one given. */
export function storeRecord(
  key: string,
  addresses: string[],
  more: Partial<AttachmentRecord> = {},
): AttachmentRecord {
  const [workloadId = '', ifName = ''] = key.split('/');
  return {
    key,
    workloadId,
    ifName,
    netnsPath: '/var/run/netns/x',
    netnsInode: 1,
    ips: addresses.map((address) => ({ family: 4, address, gateway: '169.254.1.1' })),
    mtu: 1500,
    backend: 'test',
    state: 'ready',
    createdAt: new Date(0).toISOString(),
    ...more,
  };
}
