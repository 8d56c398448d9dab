// An attachment is named by its workload and interface, `<workloadId>/<ifName>`: the store's key, the
// name backends give their objects (a host link's alias, a DPU port's key), and the API's reference.
// Validation refuses a '/' in either part, so the last '/' splits a key back into both.

/** `<workloadId>/<ifName>`; build it with attachmentKey, take it apart with parseAttachmentKey. */
export type AttachmentKey = string;

export function attachmentKey(workloadId: string, ifName: string): AttachmentKey {
  return `${workloadId}/${ifName}`;
}

export function parseAttachmentKey(key: AttachmentKey): { workloadId: string; ifName: string } {
  const slash = key.lastIndexOf('/');
  return { workloadId: key.slice(0, slash), ifName: key.slice(slash + 1) };
}
