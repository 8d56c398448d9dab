/*
 * netlink-floor: the kernel's floor for a workloadnet attach and detach. It sends, per workload,
 * exactly the rtnetlink messages the Linux backend sends (backends/linux: veth-pair.ts, host-side.ts,
 * workload-side.ts, linux-backend.ts), batched into the same writes, on sockets in the same
 * namespaces, but synchronously from C: no event loop, no threadpool, no daemon. What it costs is what
 * the same kernel work costs with nothing else around it.
 *
 *   netlink-floor COUNT PARALLEL PATHS_FILE
 *
 * Runs in the node namespace (its own network namespace stands for the host side). PATHS_FILE holds
 * COUNT workload namespace paths, one a line. Phases, in order: "warm" (one untimed attach+detach
 * round, PARALLEL threads), "attach-seq" and "detach-seq" (one at a time), "attach-par" and
 * "detach-par" (PARALLEL threads, each synchronous; concurrent detaches share group deletes the way
 * the backend's GroupDeleter does), then "attach-cold" and "detach-cold": one at a time again, with
 * COLD_KIB (16 MiB) of memory written before each operation, untimed, so that the kernel's data
 * starts out of the CPU caches, as it does in a daemon whose other work runs between attaches. It
 * prints "lat PHASE I MICROSECONDS" per operation and "phase PHASE WALL_US USER_US SYS_US" per phase
 * (CPU of the whole process from getrusage: the kernel's work in write() counts as system time). With
 * NETLINK_FLOOR_STEPS=1 in the environment it also prints
 * "step I US_OPEN US_SOCKET US_NEWLINK US_WORKLOAD US_HOST US_ALIAS US_CLOSE" for each attach of the
 * sequential phase (where the floor's own time goes).
 *
 * Per attach (the backend's order):
 *   open the namespace (O_RDONLY|O_NONBLOCK), fstat, NS_GET_NSTYPE; setns into it, socket(), setns
 *   back; NETLINK_EXT_ACK, NETLINK_CAP_ACK, SO_RCVTIMEO, SO_RCVBUFFORCE
 *   host:     RTM_NEWLINK veth, peer born in the namespace, one queue each (ACK|ECHO|CREATE|EXCL)
 *             -> echo + ACK
 *   host:     [SETLINK no IPv6 link-local, SETLINK proxy_arp+forwarding, NEWROUTE /32 replace (ACK)]
 *                                                              one write
 *   workload: [SETLINK lo up, SETLINK eth0 mtu, SETLINK eth0 no IPv6 link-local, SETLINK eth0 up,
 *              NEWADDR /32 nodad, NEWROUTE gw/32 scope link, NEWROUTE default via gw (ACK)]   one write
 *   host:     SETLINK alias (ACK)
 *   close the workload socket and the namespace fd
 * Per detach:
 *   host:     [DELROUTE /32 oif, SETLINK by name: down, detaching group (ACK)]   one write
 *   host:     RTM_DELLINK of the detaching group (ACK), shared by the detaches gathered meanwhile
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif
#define NS_GET_NSTYPE 0xb703
#define IPV4_DEVCONF_FORWARDING 1
#define IPV4_DEVCONF_PROXY_ARP 3
#define IFA_F_NODAD_FLAG 0x02

/* The backend's defaults (core/config.ts): link group, detaching group, gateway, MTU. */
#define LINK_GROUP 30574
#define DETACH_GROUP 30575
#define MTU 1500
static const char *IFNAME = "eth0";

static int home_fd = -1;
static int count, parallel;
static char **paths;
static int *host_index;  /* per workload, from the NEWLINK echo */
static uint32_t gateway; /* 169.254.1.1, network order */
static int print_steps;   /* NETLINK_FLOOR_STEPS=1 */
static long long (*step_us)[8]; /* per workload, sequential phase only */
static int sequential;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "netlink-floor: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- message building ---- */

struct buf {
  unsigned char b[4096];
  size_t len;
};

static void *put(struct buf *m, const void *data, size_t n) {
  size_t aligned = NLMSG_ALIGN(n);
  if (m->len + aligned > sizeof m->b) die("message buffer overflow");
  void *at = m->b + m->len;
  memset(at, 0, aligned);
  if (data) memcpy(at, data, n);
  m->len += aligned;
  return at;
}

static size_t msg_begin(struct buf *m, uint16_t type, uint16_t flags, uint32_t seq) {
  size_t at = m->len;
  struct nlmsghdr h = {.nlmsg_type = type, .nlmsg_flags = flags, .nlmsg_seq = seq};
  put(m, &h, sizeof h);
  return at;
}

static void msg_end(struct buf *m, size_t at) {
  ((struct nlmsghdr *)(m->b + at))->nlmsg_len = (uint32_t)(m->len - at);
}

static void attr(struct buf *m, uint16_t type, const void *data, size_t n) {
  struct nlattr a = {.nla_len = (uint16_t)(NLA_HDRLEN + n), .nla_type = type};
  put(m, &a, sizeof a);
  /* put() pads to 4 bytes; nla_len stays unpadded, as the kernel expects. */
  if (n) put(m, data, n);
}

static void attr_u32(struct buf *m, uint16_t type, uint32_t v) { attr(m, type, &v, 4); }
static void attr_str(struct buf *m, uint16_t type, const char *s) { attr(m, type, s, strlen(s) + 1); }

static size_t nest_begin(struct buf *m, uint16_t type) {
  size_t at = m->len;
  struct nlattr a = {.nla_type = type};
  put(m, &a, sizeof a);
  return at;
}

static void nest_end(struct buf *m, size_t at) {
  ((struct nlattr *)(m->b + at))->nla_len = (uint16_t)(m->len - at);
}

static void ifinfo(struct buf *m, int index, unsigned flags, unsigned change) {
  struct ifinfomsg i = {.ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = flags, .ifi_change = change};
  put(m, &i, sizeof i);
}

static void rtmsg_put(struct buf *m, unsigned char dst_len, unsigned char proto, unsigned char scope,
                      unsigned char type) {
  struct rtmsg r = {.rtm_family = AF_INET,
                    .rtm_dst_len = dst_len,
                    .rtm_table = RT_TABLE_MAIN,
                    .rtm_protocol = proto,
                    .rtm_scope = scope,
                    .rtm_type = type};
  put(m, &r, sizeof r);
}

/* ---- sockets ---- */

static void sockopts(int fd) {
  int one = 1, rcvbuf = 4 * 1024 * 1024;
  struct timeval tv = {.tv_sec = 10};
  if (setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    die("setsockopt: %s", strerror(errno));
}

static int netlink_socket(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) die("socket: %s", strerror(errno));
  return fd;
}

static void send_all(int fd, struct buf *m) {
  ssize_t n = write(fd, m->b, m->len);
  if (n != (ssize_t)m->len) die("netlink write: %s", n < 0 ? strerror(errno) : "short write");
}

/*
 * Reads datagrams until the ACK (or DONE) for `last_seq`. Any error for a request of the batch is
 * fatal unless it is `tolerated` (e.g. ENODEV for an empty group). With `link_out`, the echoed
 * RTM_NEWLINK's ifindex and IFLA_LINK (the peer's ifindex) are returned.
 */
static int await_ack(int fd, uint32_t last_seq, int tolerated, int *index_out, int *peer_out,
                     const char *what) {
  static __thread unsigned char rbuf[65536];
  for (;;) {
    ssize_t got = read(fd, rbuf, sizeof rbuf);
    if (got < 0) die("%s: netlink read: %s", what, strerror(errno));
    int n = (int)got;
    for (struct nlmsghdr *h = (struct nlmsghdr *)rbuf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *e = NLMSG_DATA(h);
        if (e->error != 0 && -e->error != tolerated)
          die("%s: kernel answered %s (seq %u)", what, strerror(-e->error), h->nlmsg_seq);
        if (h->nlmsg_seq == last_seq) return e->error;
      } else if (h->nlmsg_type == RTM_NEWLINK && index_out) {
        struct ifinfomsg *i = NLMSG_DATA(h);
        *index_out = i->ifi_index;
        int alen = (int)IFLA_PAYLOAD(h);
        for (struct rtattr *a = IFLA_RTA(i); RTA_OK(a, alen); a = RTA_NEXT(a, alen))
          if (a->rta_type == IFLA_LINK && peer_out) *peer_out = *(int *)RTA_DATA(a);
      }
    }
  }
}

/* ---- one attach, one detach ---- */

struct worker {
  int host;       /* netlink socket in the node namespace, this thread's */
  uint32_t seq;
  unsigned rand;
};

static void host_name(char *out, size_t n, int i) { snprintf(out, n, "wf%011x", (unsigned)i * 2654435761u); }

static uint32_t workload_address(int i) {
  return htonl((10u << 24) | (254u << 16) | (uint32_t)((i / 250) << 8) | (uint32_t)(i % 250 + 2));
}

/* SETLINK: IFLA_AF_SPEC { AF_INET6 { IFLA_INET6_ADDR_GEN_MODE = none } }, no ACK (not the last). */
static void no_link_local(struct buf *m, uint32_t seq, int index) {
  size_t h = msg_begin(m, RTM_SETLINK, NLM_F_REQUEST, seq);
  ifinfo(m, index, 0, 0);
  size_t af = nest_begin(m, IFLA_AF_SPEC | NLA_F_NESTED);
  size_t in6 = nest_begin(m, AF_INET6 | NLA_F_NESTED);
  unsigned char mode = 1; /* IN6_ADDR_GEN_MODE_NONE */
  attr(m, 8 /* IFLA_INET6_ADDR_GEN_MODE */, &mode, 1);
  nest_end(m, in6);
  nest_end(m, af);
  msg_end(m, h);
}

/* A /32 route to `dst` on the link `oif` (scope link): the host's route to the workload, and the
 * workload's route to its gateway. */
static void link_route(struct buf *m, uint16_t flags, uint32_t seq, uint32_t dst, int oif) {
  size_t h = msg_begin(m, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_CREATE | flags, seq);
  rtmsg_put(m, 32, RTPROT_STATIC, RT_SCOPE_LINK, RTN_UNICAST);
  attr_u32(m, RTA_DST, dst);
  attr_u32(m, RTA_OIF, (uint32_t)oif);
  attr_u32(m, RTA_TABLE, RT_TABLE_MAIN);
  msg_end(m, h);
}

static void attach(struct worker *w, int i) {
  long long mark = now_us(), *steps = sequential && step_us ? step_us[i] : NULL;
#define STEP(k)                          \
  do {                                   \
    if (steps) {                         \
      long long t_ = now_us();           \
      steps[k] = t_ - mark;              \
      mark = t_;                         \
    }                                    \
  } while (0)
  char name[IFNAMSIZ], alias[96];
  host_name(name, sizeof name, i);
  snprintf(alias, sizeof alias, "workloadnet:floor-%06d/%s", i, IFNAME);
  uint32_t addr = workload_address(i);

  /* The namespace: opened and checked as the daemon does, then a socket created inside it. */
  int ns = open(paths[i], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (ns < 0) die("open %s: %s", paths[i], strerror(errno));
  struct stat st;
  if (fstat(ns, &st) != 0 || ioctl(ns, NS_GET_NSTYPE) != CLONE_NEWNET) die("%s: not a network namespace", paths[i]);
  STEP(0);
  if (setns(ns, CLONE_NEWNET) != 0) die("setns %s: %s", paths[i], strerror(errno));
  int wl = netlink_socket();
  if (setns(home_fd, CLONE_NEWNET) != 0) die("setns back: %s", strerror(errno));
  sockopts(wl);
  STEP(1);

  /* 1. The pair, host end up, peer born in the namespace under its name, MAC chosen here. */
  unsigned char mac[6];
  for (int k = 0; k < 6; k++) mac[k] = (unsigned char)rand_r(&w->rand);
  mac[0] = (unsigned char)((mac[0] & 0xfe) | 0x02);
  struct buf m = {.len = 0};
  uint32_t seq = ++w->seq;
  size_t h = msg_begin(&m, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_ECHO | NLM_F_CREATE | NLM_F_EXCL, seq);
  ifinfo(&m, 0, IFF_UP, IFF_UP);
  attr_str(&m, IFLA_IFNAME, name);
  attr_u32(&m, IFLA_MTU, MTU);
  attr_u32(&m, IFLA_GROUP, LINK_GROUP);
  attr_u32(&m, IFLA_NUM_TX_QUEUES, 1);
  attr_u32(&m, IFLA_NUM_RX_QUEUES, 1);
  size_t li = nest_begin(&m, IFLA_LINKINFO | NLA_F_NESTED);
  attr_str(&m, IFLA_INFO_KIND, "veth");
  size_t data = nest_begin(&m, IFLA_INFO_DATA | NLA_F_NESTED);
  size_t peer = nest_begin(&m, 1 /* VETH_INFO_PEER, sent without NLA_F_NESTED as the backend does */);
  ifinfo(&m, 0, 0, 0);
  attr_str(&m, IFLA_IFNAME, IFNAME);
  attr_u32(&m, IFLA_MTU, MTU);
  attr(&m, IFLA_ADDRESS, mac, 6);
  attr_u32(&m, IFLA_NET_NS_FD, (uint32_t)ns);
  attr_u32(&m, IFLA_NUM_TX_QUEUES, 1);
  attr_u32(&m, IFLA_NUM_RX_QUEUES, 1);
  nest_end(&m, peer);
  nest_end(&m, data);
  nest_end(&m, li);
  msg_end(&m, h);
  send_all(w->host, &m);
  int hidx = 0, pidx = 0;
  await_ack(w->host, seq, 0, &hidx, &pidx, "create veth");
  if (hidx <= 0 || pidx <= 0) die("create veth: no ifindexes in the echo (kernel before 6.3?)");
  host_index[i] = hidx;
  STEP(2);

  /* 2a. Host side first, one write: its end goes without a link-local address before the workload
   * end's up gives it a carrier (backends/linux/link-local.ts). */
  m.len = 0;
  no_link_local(&m, ++w->seq, hidx);
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST, ++w->seq);
  ifinfo(&m, hidx, 0, 0);
  size_t af = nest_begin(&m, IFLA_AF_SPEC | NLA_F_NESTED);
  size_t inet = nest_begin(&m, AF_INET | NLA_F_NESTED);
  size_t conf = nest_begin(&m, 1 /* IFLA_INET_CONF */ | NLA_F_NESTED);
  attr_u32(&m, IPV4_DEVCONF_FORWARDING, 1);
  attr_u32(&m, IPV4_DEVCONF_PROXY_ARP, 1);
  nest_end(&m, conf);
  nest_end(&m, inet);
  nest_end(&m, af);
  msg_end(&m, h);
  uint32_t host_last = ++w->seq;
  link_route(&m, NLM_F_ACK | NLM_F_REPLACE, host_last, addr, hidx);
  send_all(w->host, &m);
  await_ack(w->host, host_last, 0, NULL, NULL, "host side");
  STEP(4);

  /* 2b. Workload side: one write, ACK on the last request only. */
  m.len = 0;
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST, ++w->seq);
  ifinfo(&m, 0, IFF_UP, IFF_UP);
  attr_str(&m, IFLA_IFNAME, "lo");
  msg_end(&m, h);
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST, ++w->seq);
  ifinfo(&m, pidx, 0, 0);
  attr_u32(&m, IFLA_MTU, MTU);
  msg_end(&m, h);
  no_link_local(&m, ++w->seq, pidx);
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST, ++w->seq);
  ifinfo(&m, pidx, IFF_UP, IFF_UP);
  msg_end(&m, h);
  h = msg_begin(&m, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL, ++w->seq);
  struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = 32, .ifa_flags = IFA_F_NODAD_FLAG,
                          .ifa_index = (unsigned)pidx};
  put(&m, &ifa, sizeof ifa);
  attr_u32(&m, IFA_LOCAL, addr);
  attr_u32(&m, IFA_ADDRESS, addr);
  msg_end(&m, h);
  link_route(&m, NLM_F_EXCL, ++w->seq, gateway, pidx);
  uint32_t wl_last = ++w->seq;
  h = msg_begin(&m, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, wl_last);
  rtmsg_put(&m, 0, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST);
  attr_u32(&m, RTA_GATEWAY, gateway);
  attr_u32(&m, RTA_OIF, (uint32_t)pidx);
  attr_u32(&m, RTA_TABLE, RT_TABLE_MAIN);
  msg_end(&m, h);
  send_all(wl, &m);
  await_ack(wl, wl_last, 0, NULL, NULL, "workload side");
  STEP(3);

  /* 3. The alias last: a host link with it is a complete attachment. */
  m.len = 0;
  seq = ++w->seq;
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
  ifinfo(&m, hidx, 0, 0);
  attr(&m, IFLA_IFALIAS, alias, strlen(alias));
  msg_end(&m, h);
  send_all(w->host, &m);
  await_ack(w->host, seq, 0, NULL, NULL, "alias");
  STEP(5);

  close(wl);
  close(ns);
  STEP(6);
#undef STEP
}

/* Group commit of link deletes, as backends/linux/group-deleter.ts: one RTM_DELLINK by group in
 * flight; whoever arrives meanwhile is covered by the next one. */
static pthread_mutex_t group_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t group_cv = PTHREAD_COND_INITIALIZER;
static unsigned long group_requested, group_done;
static int group_running;

static void group_flush(struct worker *w) {
  pthread_mutex_lock(&group_mu);
  unsigned long ticket = ++group_requested;
  while (group_done < ticket) {
    if (group_running) {
      pthread_cond_wait(&group_cv, &group_mu);
      continue;
    }
    group_running = 1;
    unsigned long upto = group_requested;
    pthread_mutex_unlock(&group_mu);
    struct buf m = {.len = 0};
    uint32_t seq = ++w->seq;
    size_t h = msg_begin(&m, RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
    ifinfo(&m, 0, 0, 0);
    attr_u32(&m, IFLA_GROUP, DETACH_GROUP);
    msg_end(&m, h);
    send_all(w->host, &m);
    await_ack(w->host, seq, ENODEV, NULL, NULL, "group delete");
    pthread_mutex_lock(&group_mu);
    group_running = 0;
    group_done = upto;
    pthread_cond_broadcast(&group_cv);
  }
  pthread_mutex_unlock(&group_mu);
}

static void detach(struct worker *w, int i) {
  char name[IFNAMSIZ];
  host_name(name, sizeof name, i);
  struct buf m = {.len = 0};
  size_t h = msg_begin(&m, RTM_DELROUTE, NLM_F_REQUEST, ++w->seq);
  rtmsg_put(&m, 32, RTPROT_UNSPEC, RT_SCOPE_NOWHERE, RTN_UNSPEC);
  attr_u32(&m, RTA_DST, workload_address(i));
  attr_u32(&m, RTA_OIF, (uint32_t)host_index[i]);
  attr_u32(&m, RTA_TABLE, RT_TABLE_MAIN);
  msg_end(&m, h);
  uint32_t seq = ++w->seq;
  h = msg_begin(&m, RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
  ifinfo(&m, 0, 0, IFF_UP);
  attr_str(&m, IFLA_IFNAME, name);
  attr_u32(&m, IFLA_GROUP, DETACH_GROUP);
  msg_end(&m, h);
  send_all(w->host, &m);
  await_ack(w->host, seq, 0, NULL, NULL, "take down");
  group_flush(w);
}

/* ---- phases ---- */

struct phase {
  const char *name;
  int detaching;
  int next; /* shared work index, under phase_mu */
  long long *lat;
};
static pthread_mutex_t phase_mu = PTHREAD_MUTEX_INITIALIZER;

/* Memory written before each operation of the cold phases: more than this machine's caches hold. */
#define COLD_KIB 16384
static volatile unsigned char *cold_buf; /* set for the cold phases only */

/* One write per cache line of COLD_KIB: evicts what the previous operation left in the caches. */
static void evict_caches(void) {
  for (size_t k = 0; k < (size_t)COLD_KIB * 1024; k += 64) cold_buf[k]++;
}

struct thread_arg {
  struct phase *p;
  int id;
};

static void *run_worker(void *arg) {
  struct thread_arg *t = arg;
  struct worker w = {.host = netlink_socket(), .seq = (uint32_t)t->id << 24, .rand = (unsigned)(t->id * 7919 + getpid())};
  sockopts(w.host);
  for (;;) {
    pthread_mutex_lock(&phase_mu);
    int i = t->p->next < count ? t->p->next++ : -1;
    pthread_mutex_unlock(&phase_mu);
    if (i < 0) break;
    if (cold_buf) evict_caches();
    long long t0 = now_us();
    if (t->p->detaching)
      detach(&w, i);
    else
      attach(&w, i);
    t->p->lat[i] = now_us() - t0;
  }
  close(w.host);
  return NULL;
}

static long long tv_us(struct timeval tv) { return (long long)tv.tv_sec * 1000000 + tv.tv_usec; }

static void run_phase(const char *name, int detaching, int threads, int report) {
  struct phase p = {.name = name, .detaching = detaching, .next = 0, .lat = calloc((size_t)count, sizeof(long long))};
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  struct thread_arg *args = calloc((size_t)threads, sizeof *args);
  if (!p.lat || !tids || !args) die("out of memory");
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  long long t0 = now_us();
  if (threads == 1) {
    args[0] = (struct thread_arg){&p, 1};
    run_worker(&args[0]);
  } else {
    for (int k = 0; k < threads; k++) {
      args[k] = (struct thread_arg){&p, k + 1};
      if (pthread_create(&tids[k], NULL, run_worker, &args[k]) != 0) die("pthread_create failed");
    }
    for (int k = 0; k < threads; k++) pthread_join(tids[k], NULL);
  }
  long long wall = now_us() - t0;
  getrusage(RUSAGE_SELF, &r1);
  if (report) {
    for (int i = 0; i < count; i++) printf("lat %s %d %lld\n", name, i, p.lat[i]);
    printf("phase %s %lld %lld %lld\n", name, wall, tv_us(r1.ru_utime) - tv_us(r0.ru_utime),
           tv_us(r1.ru_stime) - tv_us(r0.ru_stime));
    fflush(stdout);
  }
  free(p.lat);
  free(tids);
  free(args);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: netlink-floor COUNT PARALLEL PATHS_FILE   (run inside the node namespace, as root)\n");
    return 2;
  }
  count = atoi(argv[1]);
  parallel = atoi(argv[2]);
  if (count < 1 || parallel < 1) die("COUNT and PARALLEL must be at least 1");
  if (count > 250 * 250) die("COUNT must be at most 62500 (addresses come from 10.254.0.0/16)");
  FILE *f = fopen(argv[3], "r");
  if (!f) die("open %s: %s", argv[3], strerror(errno));
  paths = calloc((size_t)count, sizeof *paths);
  host_index = calloc((size_t)count, sizeof *host_index);
  if (!paths || !host_index) die("out of memory");
  char line[4096];
  for (int i = 0; i < count; i++) {
    if (!fgets(line, sizeof line, f)) die("%s has fewer than %d paths", argv[3], count);
    line[strcspn(line, "\n")] = '\0';
    paths[i] = strdup(line);
  }
  fclose(f);
  home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_fd < 0) die("open own namespace: %s", strerror(errno));
  inet_pton(AF_INET, "169.254.1.1", &gateway);
  const char *env = getenv("NETLINK_FLOOR_STEPS");
  print_steps = env && strcmp(env, "1") == 0;
  if (print_steps && !(step_us = calloc((size_t)count, sizeof *step_us))) die("out of memory");

  run_phase("warm-attach", 0, parallel, 0);
  run_phase("warm-detach", 1, parallel, 0);
  sequential = 1;
  run_phase("attach-seq", 0, 1, 1);
  sequential = 0;
  if (step_us)
    for (int i = 0; i < count; i++)
      printf("step %d %lld %lld %lld %lld %lld %lld %lld\n", i, step_us[i][0], step_us[i][1], step_us[i][2],
             step_us[i][3], step_us[i][4], step_us[i][5], step_us[i][6]);
  run_phase("detach-seq", 1, 1, 1);
  run_phase("attach-par", 0, parallel, 1);
  run_phase("detach-par", 1, parallel, 1);
  if (!(cold_buf = calloc(COLD_KIB, 1024))) die("out of memory");
  run_phase("attach-cold", 0, 1, 1);
  run_phase("detach-cold", 1, 1, 1);
  return 0;
}
