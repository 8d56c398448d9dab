/*
 * workloadnet-cni: the `workloadnet` CNI plugin executable that container runtimes run.
 *
 * It does no CNI work itself. It forwards the call (every CNI_* environment variable and all of stdin)
 * to the workloadnet daemon as one HTTP/1.1 request on a unix socket, prints the daemon's answer on
 * stdout and exits with the status the daemon names. The wire format is described at the top of
 * adapters/cni/cni-server.ts. A forwarder in C costs a runtime about as much as exec'ing any small
 * static binary, where starting Node would cost ~90 ms per pod event.
 *
 * Socket: the network config's top-level "socket" field, else $WORKLOADNET_CNI_SOCKET, else
 * /run/workloadnet/cni.sock. The whole call is bounded by 30 s ($WORKLOADNET_CNI_TIMEOUT_MS overrides).
 *
 * Only what the daemon cannot answer is answered here: CNI error 50 when the daemon is unreachable,
 * and 11 ("try again later") when it does not answer in time or drops the connection mid-call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_SOCKET "/run/workloadnet/cni.sock"
#define DEFAULT_TIMEOUT_MS 30000LL
/* Far above any real config (the daemon refuses more than 1 MiB); only guards memory. */
#define MAX_STDIN_BYTES ((size_t)64 << 20)
#define MAX_ANSWER_BYTES ((size_t)64 << 20)
/* install-cni recognises its own binary by this string; keep it in sync with adapters/cni/install.ts. */
#define USER_AGENT "workloadnet-cni/1"

enum {
  CNI_IO_FAILURE = 5,
  CNI_DECODING_FAILURE = 6,
  CNI_TRY_AGAIN_LATER = 11,
  CNI_PLUGIN_NOT_AVAILABLE = 50,
  CNI_INTERNAL = 999,
};

struct buf {
  char *p;
  size_t len, cap;
};

static char cni_version[32] = "1.1.0";
static const char *socket_path = DEFAULT_SOCKET;
static long long deadline_ms;
static long long timeout_ms = DEFAULT_TIMEOUT_MS;
/* Set when the config names a socket this program cannot decode: never fall back silently. */
static int socket_field_bad;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int remaining_ms(void) {
  long long r = deadline_ms - now_ms();
  if (r <= 0) return 0;
  return r > INT_MAX ? INT_MAX : (int)r;
}

/* ---- output ---- */

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      (void)poll(&pfd, 1, 1000);
    } else {
      /* stdout is gone: nothing left to tell anyone. */
      _exit(1);
    }
  }
}

static int buf_reserve(struct buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2) return -1;
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

static int buf_add(struct buf *b, const char *s, size_t n) {
  if (buf_reserve(b, n)) return -1;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return 0;
}

static int buf_str(struct buf *b, const char *s) { return buf_add(b, s, strlen(s)); }

/* Append s as a JSON string literal. Bytes >= 0x80 pass through: JSON text is UTF-8. */
static int buf_json(struct buf *b, const char *s, size_t n) {
  if (buf_reserve(b, n + 2)) return -1;
  b->p[b->len++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    const char *e = NULL;
    switch (c) {
      case '"': e = "\\\""; break;
      case '\\': e = "\\\\"; break;
      case '\n': e = "\\n"; break;
      case '\r': e = "\\r"; break;
      case '\t': e = "\\t"; break;
      case '\b': e = "\\b"; break;
      case '\f': e = "\\f"; break;
      default:
        if (c < 0x20) {
          snprintf(esc, sizeof esc, "\\u%04x", c);
          e = esc;
        }
    }
    if (e) {
      if (buf_str(b, e)) return -1;
    } else {
      if (buf_reserve(b, 1)) return -1;
      b->p[b->len++] = (char)c;
    }
  }
  if (buf_reserve(b, 1)) return -1;
  b->p[b->len++] = '"';
  return 0;
}

/* Print CNI error JSON on stdout and exit 1. The only answers this program makes by itself. */
__attribute__((noreturn, format(printf, 3, 4))) static void fail(int code, const char *details, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct buf out = {0};
  char num[16];
  snprintf(num, sizeof num, "%d", code);
  if (buf_str(&out, "{\"cniVersion\":") || buf_json(&out, cni_version, strlen(cni_version)) ||
      buf_str(&out, ",\"code\":") || buf_str(&out, num) || buf_str(&out, ",\"msg\":") ||
      buf_json(&out, msg, strlen(msg)) || (details && *details && (buf_str(&out, ",\"details\":") ||
      buf_json(&out, details, strlen(details)))) || buf_str(&out, "}\n")) {
    static const char oom[] = "{\"code\":999,\"msg\":\"workloadnet-cni: out of memory\"}\n";
    write_all(1, oom, sizeof oom - 1);
    exit(1);
  }
  write_all(1, out.p, out.len);
  exit(1);
}

__attribute__((noreturn)) static void fail_timeout(const char *stage) {
  fail(CNI_TRY_AGAIN_LATER, "the daemon may be overloaded or stuck; the runtime will retry",
       "workloadnet-cni gave up after %lld ms while %s (daemon socket %s)", timeout_ms, stage, socket_path);
}

__attribute__((noreturn)) static void fail_lost(const char *stage, int err) {
  fail(CNI_TRY_AGAIN_LATER, "the daemon may have restarted; the runtime will retry",
       "connection to the workloadnet daemon at %s lost while %s: %s", socket_path, stage,
       err ? strerror(err) : "closed early");
}

/* Wait until fd is ready for `events`, or give up at the deadline. */
static void wait_fd(int fd, short events, const char *stage) {
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = events};
    int r = poll(&pfd, 1, remaining_ms());
    if (r > 0) return;
    if (r == 0) fail_timeout(stage);
    if (errno != EINTR) fail(CNI_IO_FAILURE, NULL, "poll failed while %s: %s", stage, strerror(errno));
  }
}

/* ---- input ---- */

static void read_stdin(struct buf *in) {
  for (;;) {
    if (buf_reserve(in, 65536)) fail(CNI_IO_FAILURE, NULL, "out of memory reading stdin");
    wait_fd(0, POLLIN, "reading stdin");
    ssize_t n = read(0, in->p + in->len, in->cap - in->len);
    if (n > 0) {
      in->len += (size_t)n;
      if (in->len > MAX_STDIN_BYTES) fail(CNI_DECODING_FAILURE, NULL, "stdin is larger than %zu bytes", MAX_STDIN_BYTES);
    } else if (n == 0) {
      return;
    } else if (errno == EBADF) {
      return; /* no stdin at all: forward an empty one and let the daemon judge */
    } else if (errno != EINTR && errno != EAGAIN) {
      fail(CNI_IO_FAILURE, NULL, "cannot read stdin: %s", strerror(errno));
    }
  }
}

/*
 * A minimal JSON walk over the config's top level, enough to find "socket" and "cniVersion" without
 * being fooled by the same key nested inside prevResult, runtimeConfig or args. The daemon does the
 * real parsing; on anything malformed this gives up and the defaults apply.
 */
static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* p at the opening quote; returns the position after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\') {
      p++;
    } else if (*p == '"') {
      return p + 1;
    }
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *end) {
  if (p >= end) return NULL;
  if (*p == '"') return skip_string(p, end);
  if (*p == '{' || *p == '[') {
    int depth = 0;
    while (p < end) {
      if (*p == '"') {
        p = skip_string(p, end);
        if (!p) return NULL;
        continue;
      }
      if (*p == '{' || *p == '[') depth++;
      if (*p == '}' || *p == ']') {
        if (--depth == 0) return p + 1;
      }
      p++;
    }
    return NULL;
  }
  while (p < end && !strchr(",}] \t\r\n", *p)) p++;
  return p;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decode the JSON string at p (opening quote) into out (NUL-terminated). Returns 0, or -1 if it does
 * not fit, uses a surrogate pair, or holds a NUL. */
static int decode_string(const char *p, const char *end, char *out, size_t cap) {
  size_t n = 0;
  for (p++; p < end && *p != '"'; p++) {
    char enc[3];
    size_t k = 1;
    enc[0] = *p; /* raw bytes are already UTF-8 */
    if (*p == '\\') {
      if (++p >= end) return -1;
      switch (*p) {
        case 'n': enc[0] = '\n'; break;
        case 't': enc[0] = '\t'; break;
        case 'r': enc[0] = '\r'; break;
        case 'b': enc[0] = '\b'; break;
        case 'f': enc[0] = '\f'; break;
        case 'u': {
          if (end - p < 5) return -1;
          unsigned cp = 0;
          for (int i = 1; i <= 4; i++) {
            int h = hexval(p[i]);
            if (h < 0) return -1;
            cp = cp * 16 + (unsigned)h;
          }
          p += 4;
          if (cp >= 0xd800 && cp <= 0xdfff) return -1;
          if (cp < 0x80) {
            enc[0] = (char)cp;
          } else if (cp < 0x800) {
            enc[0] = (char)(0xc0 | (cp >> 6));
            enc[1] = (char)(0x80 | (cp & 0x3f));
            k = 2;
          } else {
            enc[0] = (char)(0xe0 | (cp >> 12));
            enc[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
            enc[2] = (char)(0x80 | (cp & 0x3f));
            k = 3;
          }
          break;
        }
        default: enc[0] = *p; /* \" \\ \/ */
      }
    }
    if (enc[0] == '\0' || n + k >= cap) return -1;
    memcpy(out + n, enc, k);
    n += k;
  }
  if (p >= end) return -1;
  out[n] = '\0';
  return 0;
}

static void scan_config(const char *p, const char *end, char *sock, size_t sock_cap) {
  p = skip_ws(p, end);
  if (p >= end || *p != '{') return;
  p++;
  for (;;) {
    p = skip_ws(p, end);
    if (p >= end || *p != '"') return;
    char key[32];
    const char *key_start = p;
    p = skip_string(p, end);
    if (!p) return;
    int key_ok = decode_string(key_start, end, key, sizeof key) == 0;
    p = skip_ws(p, end);
    if (p >= end || *p != ':') return;
    p = skip_ws(p + 1, end);
    const char *value = p;
    p = skip_value(p, end);
    if (!p) return;
    if (key_ok && *value == '"') {
      if (strcmp(key, "socket") == 0) {
        socket_field_bad = decode_string(value, end, sock, sock_cap) != 0;
        if (socket_field_bad) sock[0] = '\0';
      } else if (strcmp(key, "cniVersion") == 0) {
        char v[sizeof cni_version];
        if (decode_string(value, end, v, sizeof v) == 0 && v[0]) memcpy(cni_version, v, sizeof v);
      }
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    return;
  }
}

/* ---- the call ---- */

static int connect_daemon(void) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t plen = strlen(socket_path);
  if (plen == 0 || plen >= sizeof sa.sun_path) {
    fail(CNI_PLUGIN_NOT_AVAILABLE, "set \"socket\" in the network config or WORKLOADNET_CNI_SOCKET",
         "workloadnet daemon socket path \"%s\" is empty or longer than %zu bytes", socket_path,
         sizeof sa.sun_path - 1);
  }
  memcpy(sa.sun_path, socket_path, plen + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail(CNI_IO_FAILURE, NULL, "cannot create a unix socket: %s", strerror(errno));
  for (;;) {
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    if (errno == EINTR) continue;
    if (errno == EISCONN) return fd;
    if (errno == EAGAIN || errno == EINPROGRESS || errno == EALREADY) {
      /* A unix socket's backlog is full: the daemon is alive but busy. Retry until the deadline. */
      int wait = remaining_ms();
      if (wait == 0) fail_timeout("connecting");
      (void)poll(NULL, 0, wait < 5 ? wait : 5);
      continue;
    }
    fail(CNI_PLUGIN_NOT_AVAILABLE,
         "is workloadnetd running? The socket comes from the network config's \"socket\" field, "
         "else WORKLOADNET_CNI_SOCKET, else " DEFAULT_SOCKET,
         "workloadnet daemon is not reachable at %s: %s", socket_path, strerror(errno));
  }
}

static void send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, "sending the request");
    } else {
      fail_lost("sending the request", w < 0 ? errno : 0);
    }
  }
}

struct response {
  size_t header_len; /* 0 until the blank line after the headers has arrived */
  long long content_length; /* -1 when absent */
  int status;
  int exit_code; /* -1 when absent */
  int chunked;
};

/* Parse a non-negative decimal header value; -1 if it is not one. */
static long long parse_uint(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
  if (p == end) return -1;
  long long v = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9' || v > (LLONG_MAX - 9) / 10) return -1;
    v = v * 10 + (*p - '0');
  }
  return v;
}

static int header_is(const char *line, const char *colon, const char *name) {
  size_t n = strlen(name);
  return (size_t)(colon - line) == n && strncasecmp(line, name, n) == 0;
}

static int parse_head(const char *buf, size_t len, struct response *r) {
  const char *end = memmem(buf, len, "\r\n\r\n", 4);
  if (!end) return 0;
  r->header_len = (size_t)(end - buf) + 4;
  if (end - buf < 12 || strncmp(buf, "HTTP/1.", 7) != 0) return -1;
  r->status = (int)parse_uint(buf + 9, buf + 12);
  const char *line = memmem(buf, (size_t)(end - buf), "\r\n", 2);
  while (line && line < end) {
    line += 2;
    const char *eol = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
    if (!eol) break;
    const char *colon = memchr(line, ':', (size_t)(eol - line));
    if (colon) {
      if (header_is(line, colon, "content-length")) r->content_length = parse_uint(colon + 1, eol);
      if (header_is(line, colon, "x-cni-exit-code")) {
        long long v = parse_uint(colon + 1, eol);
        r->exit_code = v >= 0 && v <= 255 ? (int)v : -1;
      }
      if (header_is(line, colon, "transfer-encoding") && memmem(colon, (size_t)(eol - colon), "chunked", 7)) {
        r->chunked = 1;
      }
    }
    line = eol;
  }
  return 1;
}

int main(void) {
  const char *t = getenv("WORKLOADNET_CNI_TIMEOUT_MS");
  if (t && *t) {
    long long v = parse_uint(t, t + strlen(t));
    if (v > 0 && v <= 86400000) timeout_ms = v; /* at most a day: keeps the deadline arithmetic sane */
  }
  deadline_ms = now_ms() + timeout_ms;

  struct buf in = {0};
  read_stdin(&in);

  static char sock[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
  sock[0] = '\0';
  scan_config(in.p ? in.p : "", (in.p ? in.p : "") + in.len, sock, sizeof sock);
  const char *env_sock = getenv("WORKLOADNET_CNI_SOCKET");
  if (socket_field_bad) {
    fail(CNI_PLUGIN_NOT_AVAILABLE, "it must be a unix socket path of at most 107 bytes",
         "the network config's \"socket\" field is not a usable path");
  }
  if (sock[0]) {
    socket_path = sock;
  } else if (env_sock && *env_sock) {
    socket_path = env_sock;
  }

  /* Body: {"env":{...every CNI_* variable...},"stdin":"..."} */
  struct buf body = {0};
  int oom = buf_str(&body, "{\"env\":{");
  int first = 1;
  for (char **e = environ; *e && !oom; e++) {
    if (strncmp(*e, "CNI_", 4) != 0) continue;
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    oom = (!first && buf_str(&body, ",")) || buf_json(&body, *e, (size_t)(eq - *e)) || buf_str(&body, ":") ||
          buf_json(&body, eq + 1, strlen(eq + 1));
    first = 0;
  }
  oom = oom || buf_str(&body, "},\"stdin\":") || buf_json(&body, in.p ? in.p : "", in.len) || buf_str(&body, "}");
  if (oom) fail(CNI_IO_FAILURE, NULL, "out of memory building the request");

  char head[256];
  int hl = snprintf(head, sizeof head,
                    "POST /v1/cni HTTP/1.1\r\nHost: workloadnet\r\nUser-Agent: " USER_AGENT
                    "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                    body.len);

  int fd = connect_daemon();
  send_all(fd, head, (size_t)hl);
  send_all(fd, body.p, body.len);

  struct buf resp = {0};
  struct response r = {.content_length = -1, .exit_code = -1};
  for (;;) {
    if (r.header_len && r.content_length >= 0 && resp.len >= r.header_len + (size_t)r.content_length) break;
    if (buf_reserve(&resp, 65536)) fail(CNI_IO_FAILURE, NULL, "out of memory reading the answer");
    ssize_t n = recv(fd, resp.p + resp.len, resp.cap - resp.len, 0);
    if (n > 0) {
      resp.len += (size_t)n;
      if (resp.len > MAX_ANSWER_BYTES) fail(CNI_INTERNAL, NULL, "answer from %s exceeds %zu bytes", socket_path, MAX_ANSWER_BYTES);
      if (!r.header_len && parse_head(resp.p, resp.len, &r) < 0) {
        fail(CNI_INTERNAL, NULL, "%s did not answer with HTTP/1.x; is it the workloadnet CNI socket?", socket_path);
      }
    } else if (n == 0) {
      break;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, "waiting for the daemon's answer");
    } else {
      fail_lost("reading the answer", errno);
    }
  }
  close(fd);

  if (!r.header_len) fail_lost("reading the answer", 0);
  if (r.chunked) fail(CNI_INTERNAL, NULL, "daemon at %s sent a chunked answer, which this forwarder does not read", socket_path);
  size_t body_len = resp.len - r.header_len;
  if (r.content_length >= 0) {
    if (body_len < (size_t)r.content_length) fail_lost("reading the answer", 0);
    body_len = (size_t)r.content_length;
  }
  if (r.exit_code < 0) {
    fail(CNI_INTERNAL, NULL, "daemon at %s answered HTTP %d without an X-CNI-Exit-Code header", socket_path, r.status);
  }
  write_all(1, resp.p + r.header_len, body_len);
  return r.exit_code;
}
