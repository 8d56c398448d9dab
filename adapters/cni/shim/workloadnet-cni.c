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
 * Answered here, without the daemon, because they need none and a runtime must get them even while the
 * daemon is down or elsewhere (libcni, CRI-O and Multus probe plugins with VERSION):
 *   - VERSION (the versions the daemon speaks; test/adapters/cni keeps this list equal to
 *     adapters/cni/cni-version.ts),
 *   - a missing or unknown CNI_COMMAND and a missing required variable (4), an oversized or undecodable
 *     network config (6), as libcni's skeleton answers them,
 *   - the daemon unreachable (50), not answering in time or dropping the connection (11), a socket that
 *     speaks HTTP/2, i.e. the gRPC API socket named by mistake (7).
 *
 * Daemon restarts: while the socket is missing (ENOENT) or refuses (ECONNREFUSED), i.e. the daemon is
 * being restarted or upgraded, the connect is retried with a short backoff for a bounded time before
 * answering 50: 10 s for ADD/DEL/CHECK/GC, 1 s for STATUS (runtimes use it as a readiness probe and
 * must get a quick answer). Config "connectRetryMs" / "statusConnectRetryMs", else
 * $WORKLOADNET_CNI_CONNECT_RETRY_MS / $WORKLOADNET_CNI_STATUS_CONNECT_RETRY_MS, set them (0 = no retry).
 * The first attempt is immediate: a running daemon costs no retry.
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
#define DEFAULT_CONNECT_RETRY_MS 10000LL
#define DEFAULT_STATUS_CONNECT_RETRY_MS 1000LL
/* An hour: far past any runtime's own CNI timeout, and keeps the arithmetic sane. */
#define MAX_CONNECT_RETRY_MS 3600000LL
/* The retry pause starts short (a restart usually takes well under a second) and stays short. */
#define RETRY_FIRST_PAUSE_MS 10
#define RETRY_MAX_PAUSE_MS 100
/* The daemon refuses request bodies over 1 MiB (cni-server.ts); a real config is a few KiB. */
#define MAX_STDIN_BYTES ((size_t)1 << 20)
#define MAX_ANSWER_BYTES ((size_t)64 << 20)
/* install-cni recognises its own binary by this string; keep it in sync with adapters/cni/install.ts. */
#define USER_AGENT "workloadnet-cni/1"

/* The versions the daemon speaks, oldest first, and the one it labels its own output with. Keep equal
 * to SUPPORTED_CNI_VERSIONS and LATEST_CNI_VERSION in adapters/cni/cni-version.ts (a test checks). */
static const char *const supported_versions[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};
#define LATEST_VERSION "1.1.0"

enum {
  CNI_INVALID_ENVIRONMENT = 4,
  CNI_IO_FAILURE = 5,
  CNI_DECODING_FAILURE = 6,
  CNI_INVALID_NETWORK_CONFIG = 7,
  CNI_TRY_AGAIN_LATER = 11,
  CNI_PLUGIN_NOT_AVAILABLE = 50,
  CNI_INTERNAL = 999,
};

struct buf {
  char *p;
  size_t len, cap;
};

static char cni_version[32] = LATEST_VERSION;
static const char *socket_path = DEFAULT_SOCKET;
static long long deadline_ms;
static long long timeout_ms = DEFAULT_TIMEOUT_MS;

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

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
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

/* Print CNI error JSON on stdout and exit 1. */
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

/* Read all of stdin, at most MAX_STDIN_BYTES + 1 of it; returns 1 when there was more than the limit. */
static int read_stdin(struct buf *in) {
  for (;;) {
    if (buf_reserve(in, 65536)) fail(CNI_IO_FAILURE, NULL, "out of memory reading stdin");
    wait_fd(0, POLLIN, "reading stdin");
    size_t room = in->cap - in->len;
    if (room > MAX_STDIN_BYTES + 1 - in->len) room = MAX_STDIN_BYTES + 1 - in->len;
    ssize_t n = read(0, in->p + in->len, room);
    if (n > 0) {
      in->len += (size_t)n;
      /* Stop reading rather than drain: the runtime gets its answer at once and sees EPIPE. */
      if (in->len > MAX_STDIN_BYTES) return 1;
    } else if (n == 0) {
      return 0;
    } else if (errno == EBADF) {
      return 0; /* no stdin at all: an empty config, judged below */
    } else if (errno != EINTR && errno != EAGAIN) {
      fail(CNI_IO_FAILURE, NULL, "cannot read stdin: %s", strerror(errno));
    }
  }
}

/*
 * The network config is checked here with a strict, iterative RFC 8259 scanner instead of a JSON
 * library: the forwarder has no dependencies (it must run on any node from one static file), and a
 * full parser building a tree would be more code than the check itself. What it needs is narrow:
 * decide "is this JSON text, and an object?" exactly as JSON.parse in the daemon does, and read a few
 * top-level members (socket, cniVersion, the retry budgets) without being fooled by the same keys
 * nested inside prevResult, runtimeConfig or args. Nesting is tracked on a heap stack, never by
 * recursion, so no input can overflow the C stack; the last of duplicate keys wins, as in JSON.parse.
 * Bytes >= 0x80 are not checked as UTF-8: neither the daemon nor Go's encoding/json refuses them.
 */
struct scan {
  const char *p, *end;
  const char *error; /* set on the first syntax error */
  size_t error_at;
  const char *start;
};

static const char *scan_error(struct scan *s, const char *what) {
  if (!s->error) {
    s->error = what;
    s->error_at = (size_t)(s->p - s->start);
  }
  return NULL;
}

static void skip_ws(struct scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* s->p at the opening quote; moves past the closing one. */
static int scan_string(struct scan *s) {
  for (s->p++; s->p < s->end; s->p++) {
    unsigned char c = (unsigned char)*s->p;
    if (c == '"') {
      s->p++;
      return 1;
    }
    if (c < 0x20) return scan_error(s, "control character in a string") != NULL;
    if (c == '\\') {
      if (++s->p >= s->end) break;
      if (*s->p == 'u') {
        if (s->end - s->p < 5 || !is_hex(s->p[1]) || !is_hex(s->p[2]) || !is_hex(s->p[3]) || !is_hex(s->p[4]))
          return scan_error(s, "bad \\u escape") != NULL;
        s->p += 4;
      } else if (!strchr("\"\\/bfnrt", *s->p) || *s->p == '\0') {
        return scan_error(s, "bad escape in a string") != NULL;
      }
    }
  }
  return scan_error(s, "unterminated string") != NULL;
}

static int scan_digits(struct scan *s) {
  const char *d = s->p;
  while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
  return s->p > d;
}

static int scan_number(struct scan *s) {
  if (*s->p == '-') s->p++;
  if (s->p < s->end && *s->p == '0') {
    s->p++;
  } else if (!scan_digits(s)) {
    return scan_error(s, "bad number") != NULL;
  }
  if (s->p < s->end && *s->p == '.') {
    s->p++;
    if (!scan_digits(s)) return scan_error(s, "bad number") != NULL;
  }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
    s->p++;
    if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
    if (!scan_digits(s)) return scan_error(s, "bad number") != NULL;
  }
  return 1;
}

static int scan_literal(struct scan *s, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return scan_error(s, "unexpected character") != NULL;
  s->p += n;
  return 1;
}

typedef void (*member_fn)(const char *key, size_t key_len, const char *value, const char *value_end);

/*
 * Check that [p, end) is one JSON value and nothing else; call on_member for each member of the
 * top-level object (key as raw bytes between the quotes). Returns 1 when valid.
 */
static int scan_json(struct scan *s, member_fn on_member) {
  char *stack = NULL; /* '{' or '[' per open container */
  size_t depth = 0, cap = 0;
  const char *key = NULL, *key_end = NULL, *member = NULL;
  int ok = 0;
  skip_ws(s);
  for (;;) {
    /* A value. */
    if (s->p >= s->end) {
      scan_error(s, "unexpected end of input");
      goto out;
    }
    if (depth == 1 && stack[0] == '{') member = s->p;
    char c = *s->p;
    if (c == '{' || c == '[') {
      if (depth == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        char *n = realloc(stack, ncap);
        if (!n) fail(CNI_IO_FAILURE, NULL, "out of memory checking the network config");
        stack = n;
        cap = ncap;
      }
      stack[depth++] = c;
      s->p++;
      skip_ws(s);
      if (s->p < s->end && *s->p == (c == '{' ? '}' : ']')) {
        depth--;
        s->p++;
      } else if (c == '{') {
        goto key;
      } else {
        continue;
      }
    } else if (c == '"') {
      if (!scan_string(s)) goto out;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (!scan_number(s)) goto out;
    } else if (c == 't' || c == 'f' || c == 'n') {
      if (!scan_literal(s, c == 't' ? "true" : c == 'f' ? "false" : "null")) goto out;
    } else {
      scan_error(s, "unexpected character");
      goto out;
    }
  after_value:
    if (depth == 1 && member) {
      on_member(key, (size_t)(key_end - key), member, s->p);
      member = NULL;
    }
    skip_ws(s);
    if (depth == 0) {
      if (s->p != s->end) {
        scan_error(s, "unexpected data after the JSON value");
        goto out;
      }
      ok = 1;
      goto out;
    }
    if (s->p < s->end && *s->p == ',') {
      s->p++;
      skip_ws(s);
      if (stack[depth - 1] == '[') continue;
      goto key;
    }
    if (s->p < s->end && *s->p == (stack[depth - 1] == '{' ? '}' : ']')) {
      depth--;
      s->p++;
      goto after_value;
    }
    scan_error(s, stack[depth - 1] == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    goto out;
  key:
    if (s->p >= s->end || *s->p != '"') {
      scan_error(s, "expected a string key");
      goto out;
    }
    key = s->p + 1;
    if (!scan_string(s)) goto out;
    key_end = s->p - 1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') {
      scan_error(s, "expected ':'");
      goto out;
    }
    s->p++;
    skip_ws(s);
  }
out:
  free(stack);
  return ok;
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

/* ---- what the config says ---- */

static char config_socket[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
/* Set when the config names a socket this program cannot use: never fall back silently. */
static int config_socket_bad;
static const char *config_error; /* a member with the wrong type: answered 7 */
static char config_error_buf[160];
static long long config_retry_ms = -1, config_status_retry_ms = -1;

static int key_is(const char *key, size_t len, const char *name) {
  return strlen(name) == len && memcmp(key, name, len) == 0;
}

/* Non-negative integer milliseconds up to MAX_CONNECT_RETRY_MS, written as plain digits; else -1. */
static long long parse_ms(const char *p, const char *end) {
  if (p == end || (size_t)(end - p) > 10) return -1;
  long long v = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  return v <= MAX_CONNECT_RETRY_MS ? v : -1;
}

static int is_supported_version(const char *v) {
  for (size_t i = 0; i < sizeof supported_versions / sizeof *supported_versions; i++)
    if (strcmp(v, supported_versions[i]) == 0) return 1;
  return 0;
}

static void on_member(const char *key, size_t key_len, const char *value, const char *value_end) {
  /* Keys with escapes never match: none of ours needs one, and the daemon reads the same raw names. */
  if (memchr(key, '\\', key_len)) return;
  if (key_is(key, key_len, "socket")) {
    config_socket[0] = '\0';
    config_socket_bad = 0;
    if (*value == '"') {
      config_socket_bad = decode_string(value, value_end, config_socket, sizeof config_socket) != 0;
    } else if (*value != 'n') {
      config_socket_bad = 1;
    }
  } else if (key_is(key, key_len, "cniVersion")) {
    char v[sizeof cni_version];
    /* Errors are labelled with the config's version only when the daemon speaks it, as it does. */
    if (*value == '"' && decode_string(value, value_end, v, sizeof v) == 0 && is_supported_version(v))
      memcpy(cni_version, v, sizeof v);
  } else if (key_is(key, key_len, "connectRetryMs") || key_is(key, key_len, "statusConnectRetryMs")) {
    int status = key[0] == 's';
    long long v = *value == 'n' ? -1 : parse_ms(value, value_end);
    if (v < 0 && *value != 'n') {
      snprintf(config_error_buf, sizeof config_error_buf,
               "\"%s\" in the network config must be an integer number of milliseconds from 0 to %lld",
               status ? "statusConnectRetryMs" : "connectRetryMs", MAX_CONNECT_RETRY_MS);
      config_error = config_error_buf;
    }
    if (status) config_status_retry_ms = v;
    else config_retry_ms = v;
  }
}

/* The retry budget from the environment; a malformed value is the runtime's mistake (4). */
static long long env_ms(const char *name) {
  const char *t = getenv(name);
  if (!t || !*t) return -1;
  long long v = parse_ms(t, t + strlen(t));
  if (v < 0) {
    fail(CNI_INVALID_ENVIRONMENT, NULL, "%s=\"%.64s\" must be an integer number of milliseconds from 0 to %lld",
         name, t, MAX_CONNECT_RETRY_MS);
  }
  return v;
}

/* ---- answered without the daemon ---- */

static const char *const commands[] = {"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"};

/* Variables each verb requires, in the order the daemon lists them (adapters/cni/cni-request.ts). */
static const char *const *required_vars(const char *cmd) {
  static const char *const attach[] = {"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH", NULL};
  static const char *const del[] = {"CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH", NULL};
  static const char *const none[] = {NULL};
  if (strcmp(cmd, "ADD") == 0 || strcmp(cmd, "CHECK") == 0) return attach;
  if (strcmp(cmd, "DEL") == 0) return del;
  return none;
}

__attribute__((noreturn)) static void answer_version(void) {
  struct buf out = {0};
  int oom = buf_str(&out, "{\"cniVersion\":\"" LATEST_VERSION "\",\"supportedVersions\":[");
  for (size_t i = 0; i < sizeof supported_versions / sizeof *supported_versions; i++)
    oom = oom || (i && buf_str(&out, ",")) || buf_json(&out, supported_versions[i], strlen(supported_versions[i]));
  oom = oom || buf_str(&out, "]}");
  if (oom) fail(CNI_IO_FAILURE, NULL, "out of memory");
  write_all(1, out.p, out.len);
  exit(0);
}

static void check_command(const char *cmd) {
  if (!cmd || !*cmd) fail(CNI_INVALID_ENVIRONMENT, NULL, "required env variables [CNI_COMMAND] missing");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (strcmp(cmd, commands[i]) == 0) return;
  fail(CNI_INVALID_ENVIRONMENT, "supported commands: ADD, DEL, CHECK, STATUS, GC, VERSION",
       "unknown CNI_COMMAND: %.200s", cmd);
}

static void check_required(const char *cmd) {
  char missing[256] = "";
  size_t n = 0;
  for (const char *const *v = required_vars(cmd); *v; v++) {
    const char *val = getenv(*v);
    if (val && *val) continue;
    n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%s", n ? "," : "", *v);
  }
  if (n) fail(CNI_INVALID_ENVIRONMENT, NULL, "required env variables [%s] missing", missing);
}

/* ---- the call ---- */

static const char *errno_name(int err) {
  switch (err) {
    case ENOENT: return "ENOENT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOTSOCK: return "ENOTSOCK";
    case ENOTDIR: return "ENOTDIR";
    case EPROTOTYPE: return "EPROTOTYPE";
    case ELOOP: return "ELOOP";
    default: return "errno";
  }
}

/*
 * Connect, retrying while the socket is missing or refuses (a daemon restart or upgrade in progress)
 * until retry_ms have passed, and while a full backlog says EAGAIN (a busy daemon) until the deadline.
 */
static int connect_daemon(long long retry_ms) {
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
  long long started = now_ms();
  long long retry_until = started + retry_ms;
  if (retry_until > deadline_ms) retry_until = deadline_ms;
  int pause = RETRY_FIRST_PAUSE_MS;
  for (;;) {
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
        sleep_ms(wait < 5 ? wait : 5);
        continue;
      }
      break;
    }
    int err = errno;
    close(fd);
    long long left = retry_until - now_ms();
    if ((err == ENOENT || err == ECONNREFUSED) && left > 0) {
      sleep_ms(left < pause ? (int)left : pause);
      pause = pause * 2 > RETRY_MAX_PAUSE_MS ? RETRY_MAX_PAUSE_MS : pause * 2;
      continue;
    }
    char waited[96] = "";
    if ((err == ENOENT || err == ECONNREFUSED) && retry_ms > 0)
      snprintf(waited, sizeof waited, " (waited %lld ms for it to come back)", now_ms() - started);
    fail(CNI_PLUGIN_NOT_AVAILABLE,
         "is workloadnetd running? The socket comes from the network config's \"socket\" field, "
         "else WORKLOADNET_CNI_SOCKET, else " DEFAULT_SOCKET,
         "workloadnet daemon is not reachable at %s: %s (%s)%s", socket_path, strerror(err), errno_name(err),
         waited);
  }
}

__attribute__((noreturn)) static void fail_grpc(void) {
  fail(CNI_INVALID_NETWORK_CONFIG,
       "point \"socket\" in the network config (or WORKLOADNET_CNI_SOCKET) at the daemon's CNI socket "
       "(daemon flag --cni-socket, default " DEFAULT_SOCKET "), not its API socket (--socket)",
       "%s answers HTTP/2 (gRPC): it is the workloadnet API socket, not the CNI socket", socket_path);
}

/*
 * What the first bytes of the answer say about the peer: 1 plausibly HTTP/1.x, 0 not enough bytes yet,
 * -1 something else, -2 HTTP/2. An HTTP/2 server (the gRPC API) speaks first: its connection preface
 * is a SETTINGS frame (type 4) on stream 0, and after our HTTP/1.1 request it adds a GOAWAY (type 7).
 */
static int classify_peer(const unsigned char *p, size_t len, int complete) {
  static const char http1[] = "HTTP/1.";
  size_t n = len < sizeof http1 - 1 ? len : sizeof http1 - 1;
  if (memcmp(p, http1, n) == 0) return n == sizeof http1 - 1 || !complete ? 1 : -1;
  if (len < 9) return complete ? -1 : 0;
  if ((p[3] == 0x04 || p[3] == 0x07) && (p[5] & 0x7f) == 0 && p[6] == 0 && p[7] == 0 && p[8] == 0) return -2;
  return -1;
}

/* After a send failed, the peer may have said why before closing: an HTTP/2 server does. */
static void explain_send_failure(int fd) {
  unsigned char peek[64];
  ssize_t n = recv(fd, peek, sizeof peek, MSG_DONTWAIT);
  if (n > 0 && classify_peer(peek, (size_t)n, 1) == -2) fail_grpc();
}

static const char *skip_to_value(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p < end ? p : "";
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
      int err = w < 0 ? errno : 0;
      explain_send_failure(fd);
      fail_lost("sending the request", err);
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

  /* VERSION needs nothing else, not even stdin, as in libcni's skeleton. */
  const char *cmd = getenv("CNI_COMMAND");
  if (cmd && strcmp(cmd, "VERSION") == 0) answer_version();

  struct buf in = {0};
  int oversize = read_stdin(&in);
  struct scan s = {.p = in.p ? in.p : "", .end = (in.p ? in.p : "") + (oversize ? 0 : in.len)};
  s.start = s.p;
  int valid = !oversize && scan_json(&s, on_member);

  check_command(cmd);
  check_required(cmd);
  if (oversize) {
    fail(CNI_DECODING_FAILURE, NULL, "network config on stdin exceeds %zu bytes, the daemon's limit", MAX_STDIN_BYTES);
  }
  if (!valid) {
    fail(CNI_DECODING_FAILURE, NULL, "network config on stdin is not valid JSON: %s at byte %zu", s.error,
         s.error_at);
  }
  if (*skip_to_value(in.p, in.p + in.len) != '{') {
    fail(CNI_DECODING_FAILURE, NULL, "network config on stdin must be a JSON object");
  }
  if (config_error) fail(CNI_INVALID_NETWORK_CONFIG, NULL, "%s", config_error);
  if (config_socket_bad) {
    fail(CNI_PLUGIN_NOT_AVAILABLE, "it must be a unix socket path of at most 107 bytes",
         "the network config's \"socket\" field is not a usable path");
  }
  const char *env_sock = getenv("WORKLOADNET_CNI_SOCKET");
  if (config_socket[0]) {
    socket_path = config_socket;
  } else if (env_sock && *env_sock) {
    socket_path = env_sock;
  }
  long long retry_ms;
  if (strcmp(cmd, "STATUS") == 0) {
    retry_ms = config_status_retry_ms >= 0 ? config_status_retry_ms : env_ms("WORKLOADNET_CNI_STATUS_CONNECT_RETRY_MS");
    if (retry_ms < 0) retry_ms = DEFAULT_STATUS_CONNECT_RETRY_MS;
  } else {
    retry_ms = config_retry_ms >= 0 ? config_retry_ms : env_ms("WORKLOADNET_CNI_CONNECT_RETRY_MS");
    if (retry_ms < 0) retry_ms = DEFAULT_CONNECT_RETRY_MS;
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

  int fd = connect_daemon(retry_ms);
  send_all(fd, head, (size_t)hl);
  send_all(fd, body.p, body.len);

  struct buf resp = {0};
  struct response r = {.content_length = -1, .exit_code = -1};
  int peer = 0;
  for (;;) {
    if (r.header_len && r.content_length >= 0 && resp.len >= r.header_len + (size_t)r.content_length) break;
    if (buf_reserve(&resp, 65536)) fail(CNI_IO_FAILURE, NULL, "out of memory reading the answer");
    ssize_t n = recv(fd, resp.p + resp.len, resp.cap - resp.len, 0);
    if (n > 0) {
      resp.len += (size_t)n;
      if (resp.len > MAX_ANSWER_BYTES) fail(CNI_INTERNAL, NULL, "answer from %s exceeds %zu bytes", socket_path, MAX_ANSWER_BYTES);
      /* Judged again until the head is complete: a short first read may match "HTTP/1." only in part. */
      if (!r.header_len) peer = classify_peer((const unsigned char *)resp.p, resp.len, 0);
      if (peer == -2) fail_grpc();
      if (peer == -1 || (!r.header_len && parse_head(resp.p, resp.len, &r) < 0)) {
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

  if (resp.len > 0 && classify_peer((const unsigned char *)resp.p, resp.len, 1) == -2) fail_grpc();
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
