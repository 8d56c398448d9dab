// The DPU backend's public surface.
export {
  DpuBackend,
  FEATURE_HOST_ENDPOINT,
  MAX_AGENT_MESSAGE_BYTES,
  PROTOCOL_VERSION,
  type DpuBackendOptions,
} from './dpu-backend';
export { decodeDetails, type DpuDetails } from './details';
