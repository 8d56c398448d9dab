import { WorkloadNetError, type ErrorCode } from '../../core/errors';
import { AckCode, type Ack } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// How an agent's negative ack becomes the error the caller of Attach sees. The code is the contract
// (the CNI adapter maps it again); the agent's own message is kept verbatim because only the agent
// knows what was wrong.

const CODE_OF: Partial<Record<AckCode, ErrorCode>> = {
  [AckCode.ACK_CODE_INVALID]: 'INVALID_ARGUMENT',
  [AckCode.ACK_CODE_UNSUPPORTED]: 'INVALID_ARGUMENT',
  [AckCode.ACK_CODE_NO_RESOURCES]: 'RESOURCE_EXHAUSTED',
  [AckCode.ACK_CODE_INTERNAL]: 'INTERNAL',
};

export function ackCodeName(code: AckCode): string {
  switch (code) {
    case AckCode.ACK_CODE_OK:
      return 'OK';
    case AckCode.ACK_CODE_INVALID:
      return 'INVALID';
    case AckCode.ACK_CODE_NO_RESOURCES:
      return 'NO_RESOURCES';
    case AckCode.ACK_CODE_INTERNAL:
      return 'INTERNAL';
    case AckCode.ACK_CODE_UNSUPPORTED:
      return 'UNSUPPORTED';
    default:
      return `UNKNOWN(${code})`;
  }
}

/** The error for a negative ack; `who` names the agent and port for the message. */
export function nackError(ack: Ack, who: string): WorkloadNetError {
  const code = CODE_OF[ack.code] ?? 'INTERNAL';
  const detail = ack.message.trim() || 'no message given';
  // NO_RESOURCES is retryable by nature (another port may go away); otherwise the agent says.
  const retryable = ack.retryable || code === 'RESOURCE_EXHAUSTED';
  return new WorkloadNetError(
    code,
    `${who} was rejected by the agent (${ackCodeName(ack.code)}): ${detail}`,
    retryable,
  );
}
