import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { DpuAgentServiceClient, type ControllerMessage } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// A one-shot DPU agent over TCP, run by the security tests inside the daemon's node namespace (the
// daemon's agent port is on that namespace's loopback):
//
//   node tls-probe.js HOST:PORT AGENT_ID plain|tls CA_FILE [CERT_FILE KEY_FILE]
//
// It says hello and prints one JSON line: {"accepted":true} once the daemon accepts the hello, or
// {"accepted":false,"code":…,"details":…} when the connection or the hello is refused.

export interface ProbeResult {
  accepted: boolean;
  code?: number;
  details?: string;
}

export const TLS_PROBE_MAIN = __filename;

function main(): void {
  const [target, agentId, mode, ca, cert, key] = process.argv.slice(2);
  if (!target || !agentId || (mode !== 'plain' && mode !== 'tls'))
    throw new Error('usage: tls-probe HOST:PORT AGENT_ID plain|tls CA [CERT KEY]');
  const creds =
    mode === 'plain'
      ? grpc.credentials.createInsecure()
      : grpc.credentials.createSsl(
          fs.readFileSync(ca ?? ''),
          key ? fs.readFileSync(key) : null,
          cert ? fs.readFileSync(cert) : null,
        );
  const client = new DpuAgentServiceClient(target, creds);
  const call = client.connect();
  let settled = false;
  const finish = (r: ProbeResult): void => {
    if (settled) return;
    settled = true;
    process.stdout.write(`${JSON.stringify(r)}\n`);
    call.cancel();
    client.close();
    setTimeout(() => process.exit(0), 50);
  };
  call.on('data', (m: ControllerMessage) => {
    if (m.helloAccept) finish({ accepted: true });
    else if (m.helloReject) finish({ accepted: false, details: `hello rejected: ${m.helloReject.reason}` });
  });
  call.on('error', (e: grpc.ServiceError) => finish({ accepted: false, code: e.code, details: e.details }));
  call.on('status', (s: grpc.StatusObject) => finish({ accepted: false, code: s.code, details: s.details }));
  call.write({
    hello: {
      agentId,
      bootId: 'probe',
      protocolVersion: 1,
      minProtocolVersion: 0,
      maxProtocolVersion: 0,
      uplinkAddresses: [],
      uplinkMtu: 0,
      capabilities: { maxPorts: 0, ipv6: true, minMtu: 68, maxMtu: 9216, features: [] },
    },
  });
  setTimeout(() => finish({ accepted: false, details: 'no answer within 5 s' }), 5_000);
}

if (require.main === module) main();
