// The config options as a person reads them: one line per option, keyed by its dotted path in the
// config file. docs/operations.md's option reference and the daemon's --help are checked against it
// (test/docs/docs.test.ts), and an unknown key in a config file is matched against its keys.

/** One line per option, keyed by its dotted path in the config file. */
export const OPTION_DOCS: Record<string, string> = {
  socket: 'Unix socket of the gRPC workload API.',
  cniSocket: 'Unix socket of the CNI endpoint that the workloadnet-cni forwarder calls.',
  socketGroup: "Group (name or numeric gid) owning both sockets (mode 0660); empty keeps the daemon's group.",
  stateDir: 'Directory of the embedded store (LMDB). Keep it on persistent storage.',
  backend: 'Dataplane backend: "linux" (veth + rtnetlink) or "dpu" (SmartNIC agent over gRPC).',
  podCidrs:
    'Address pools, at most one address per family per attachment (e.g. ["10.88.0.0/16","fd00:88::/64"]).',
  poolSource:
    'Where address pools come from: "static" (podCidrs), "kubernetes" (this Node\'s spec.podCIDRs) or "etcd" (blocks of etcd.clusterCidrs claimed in etcd). See docs/pool-sources.md.',
  nodeName: 'Node name for the kubernetes and etcd pool sources; empty means the host name.',
  kubeconfig:
    'kubernetes pool source: kubeconfig file; empty means $KUBECONFIG, else the in-cluster service account.',
  mtu: 'MTU of workload interfaces (68-65535) unless a call asks for another; 0 (default) is auto: with the fabric on, what it carries (the uplink MTU less the encapsulation: 1450 for VXLAN over a 1500-byte IPv4 underlay), else 1500. A set value is kept exactly. See docs/fabric.md.',
  logLevel: 'Log level: trace, debug, info, warn, error or fatal.',
  maxInFlight: 'Attach calls allowed in flight at once; further calls get RESOURCE_EXHAUSTED.',
  metricsListen:
    'HOST:PORT of the HTTP listener: /metrics (Prometheus), /healthz and /readyz (probes); empty disables it.',
  eventLoopResolutionMs:
    'How often the event-loop delay metrics (nodejs_eventloop_lag_*) sample the loop (ms); a stall shorter than this may go unseen. Each sample wakes an idle daemon: 10 costs about 5 millicores.',
  apiMaxConnections:
    'Connections the gRPC API holds at once; at the cap the connection silent longest is closed to make room.',
  apiIdleTimeoutMs:
    'An API connection without a call for this long is closed (ms); clients reconnect on demand.',
  cniMaxConnections:
    'Connections the CNI endpoint holds at once; at the cap one still sending its request is closed to make room.',
  cniHeaderTimeoutMs: 'Time a CNI connection has to send its request headers (ms).',
  cniBodyTimeoutMs: 'Time a CNI request has, after its headers, to send its body (ms).',
  cniIdleTimeoutMs: 'A kept-alive CNI connection without a new request for this long is closed (ms).',
  shutdownTimeoutMs:
    'On SIGTERM, how long in-flight calls may finish before every connection is closed and the daemon exits (ms).',
  sweepIntervalMs:
    'Period of the leak sweep (ms): an attachment whose namespace is gone on two sweeps in a row is detached; 0 turns it off.',
  networks:
    'Named networks: [{"name", "backend" ("linux"|"dpu"), "podCidrs", "mtu", "defaultRoute", "routes"}]. Empty means one network, "default", made of backend, podCidrs and mtu. See docs/networks.md.',
  'linux.hostNetns': "Network namespace path facing the workloads; empty means the daemon's own.",
  'linux.linkGroup': 'Link group number marking host interfaces created by workloadnet.',
  'linux.detachGroup':
    'Link group host interfaces pass through while being deleted (many are deleted at once); give it to nothing else.',
  'linux.ipv6LinkLocal':
    "Keep the kernel's IPv6 link-local (fe80::) address on both ends of an IPv4-only link; false (default) turns it off.",
  'dpu.agentSocket': 'Unix socket on which DPU agents connect.',
  'dpu.agentListen': 'Optional HOST:PORT on which DPU agents connect over TCP with mutual TLS.',
  'dpu.tlsCert': 'Server certificate (PEM file) for dpu.agentListen.',
  'dpu.tlsKey': 'Server private key (PEM file) for dpu.agentListen.',
  'dpu.tlsCa': 'CA bundle (PEM file) that agent client certificates must chain to.',
  'dpu.ackTimeoutMs': 'How long Attach waits for the agent to acknowledge the port (ms).',
  'dpu.heartbeatIntervalMs':
    'Interval of heartbeats to agents (ms); an agent silent for 3 intervals is lost.',
  'dpu.fabricSlices':
    'With the fabric on: slices each pod range of a dpu network is cut into, one per DPU (a power of two, 1-256, default 4); a port takes its address from the slice of the DPU it is placed on. See docs/fabric.md.',
  'dpu.goneGraceSeconds':
    'etcd pool source: a DPU (agent id) not connected for this long gives back the address blocks claimed for it that hold no address in use (default 600).',
  'dpu.allowUnenforcedPolicy':
    'With NetworkPolicy on: a pod on a DPU whose agent cannot enforce it (protocol 3 or older, or no "network-policy" feature) is attached and named in Status as unenforced, instead of refused (default false).',
  'dpu.hostPort':
    "With the fabric on the DPUs: the daemon attaches the host's own namespace to the dpu network as interface wn-host0 (no default route, the cluster's ranges), so the host reaches every pod through a DPU (default true). See docs/fabric.md.",
  'etcd.endpoints': 'etcd pool source: client URLs of the etcd members (e.g. ["https://10.0.0.1:2379"]).',
  'etcd.clusterCidrs': 'etcd pool source: cluster ranges cut into blocks, at most one per family.',
  'etcd.blockSize':
    'etcd pool source: IPv4 block prefix length (20-30, default 26 = 64 addresses); IPv6 blocks are /(96+blockSize).',
  'etcd.prefix': 'etcd pool source: key prefix of block ownership and node liveness keys.',
  'etcd.ca': 'etcd pool source: CA bundle (PEM file) of the etcd server certificates; empty = plain HTTP.',
  'etcd.cert': 'etcd pool source: client certificate (PEM file) for etcd mutual TLS.',
  'etcd.key': 'etcd pool source: client private key (PEM file) for etcd mutual TLS.',
  'etcd.emptyBlockGraceSeconds':
    'etcd pool source: how long an owned block stays empty before it is given back to the cluster.',
  'fabric.mode':
    'Fabric between nodes: "off", "routed" (via directly connected peers), "vxlan", "hybrid" (routed in the subnet, VXLAN beyond) or "external" (publish only); "auto" (default) is off with the static pool source, hybrid with kubernetes or etcd. See docs/fabric.md.',
  'fabric.nodeIp':
    "Fabric: this node's underlay address; empty means the address of the interface holding the default route.",
  'fabric.vni': 'Fabric: VXLAN network identifier (1-16777215, default 30574).',
  'fabric.port': 'Fabric: VXLAN UDP port (default 4789).',
  'fabric.peersFile':
    'Fabric, static peer source: JSON file of the other nodes ({"peers":[...]}, see docs/fabric.md), reloaded on change; empty means no peers.',
  'fabric.leaseTtlSeconds':
    "Fabric, etcd peer source: TTL of the lease this node's record lives on (1-15 s): a dead node leaves its peers' tables after it.",
  'fabric.withdrawGraceSeconds':
    'Fabric: how long a peer that left its source stays programmed before its routes are removed (a lapsed lease is not proof of a dead node).',
  'fabric.probeIntervalSeconds':
    'Fabric: seconds between two data-path probes of each peer (ICMP echo to its gateway key over VXLAN, to its underlay address when routed), spread over the interval; a peer that answered before and misses 3 in a row is shown degraded (never withdrawn for it), and one that also left its source is withdrawn before the grace. 0 turns probes off. Default 5.',
  'fabric.sourceFilter':
    "Fabric: accept VXLAN only from the peers' underlay addresses (an nftables table of ours, `table inet workloadnet`; needs nft); other senders' packets are dropped and counted. false accepts VXLAN from anyone. Default true.",
  'fabric.clusterCidrs':
    "Fabric, static and kubernetes pool sources: the cluster's pod ranges, one per family (etcd has etcd.clusterCidrs). With DPUs the host port routes them, so a node that joins later is reached; the Linux fabric makes them unreachable rather than sent along the default route. Empty (default): the host port routes the ranges known when it was attached, no catch-all.",
  networkPolicy:
    'Kubernetes NetworkPolicy: "auto" (default) enforces it with the kubernetes pool source, "on" requires that source, "off" removes our rules. An attach of a pod answers only once its rules are in force. See docs/network-policy.md.',
  policyAdmitTimeoutMs:
    "How long an attach of a pod may wait to learn its labels (the policy source's first list, a read of the pod) before it is refused, retryably (ms).",
  masquerade:
    "Masquerade pods' traffic to destinations outside every cluster range (pod ranges, etcd/fabric cluster ranges, peers' prefixes) to the node's address, in an nftables table of ours (inet workloadnet_egress); pod to pod keeps its source. Default true; false for routed set-ups that announce the pod ranges. A network's own masquerade key overrides it.",
  'fabric.strictSlices':
    "Fabric with DPUs: when a DPU's slices are full, refuse the attach (RESOURCE_EXHAUSTED) instead of borrowing an address from elsewhere in the node's ranges (announced as a /32 or /128); default false.",
};
