// The DPU backend's public surface.
export { DpuBackend, MAX_AGENT_MESSAGE_BYTES, PROTOCOL_VERSION, type DpuBackendOptions } from './dpu-backend';
export { FEATURE_HOST_ENDPOINT } from './port-attach';
export { decodeDetails, type DpuDetails } from './details';
