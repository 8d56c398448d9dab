/*
 * cni-exec: executes a CNI plugin for a list of calls the way a container runtime does, and times each
 * call from just before the process is started until it has been reaped.
 *
 * Runtimes are Go programs: os/exec starts a plugin with clone(CLONE_VM|CLONE_VFORK) + execve, and so
 * does glibc's posix_spawn used here. Starting plugins from the Node benchmark process instead would
 * add Node's own spawn machinery (~1 ms on these machines) to every call of every plugin measured.
 *
 *   cni-exec PLUGIN PARALLEL DIR COUNT
 *
 * For call i in 0..COUNT-1 it reads DIR/i.env (the environment: NUL-terminated KEY=VALUE entries) and
 * DIR/i.in (stdin), and writes the plugin's stdout to DIR/i.out and its stderr to DIR/i.err. Up to
 * PARALLEL calls run at once. It prints "i status microseconds cpu-us system-us" per call as it
 * finishes, then "total microseconds". The CPU is the plugin's user + system time as wait4() reports
 * it, which includes the children it waited for (ptp's host-local). Calls start in the namespaces
 * cni-exec itself runs in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *what, const char *path) {
  fprintf(stderr, "cni-exec: %s %s: %s\n", what, path, strerror(errno));
  exit(2);
}

/* Reads a whole file; the caller frees it. */
static char *slurp(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) die("cannot stat", path);
  char *buf = malloc((size_t)st.st_size + 1);
  if (!buf) die("out of memory reading", path);
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n <= 0) die("cannot read", path);
    got += (size_t)n;
  }
  buf[got] = '\0';
  close(fd);
  *len = got;
  return buf;
}

/* Splits NUL-terminated entries into a NULL-terminated vector pointing into buf. */
static char **split_env(char *buf, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++)
    if (buf[i] == '\0') n++;
  char **env = calloc(n + 1, sizeof *env);
  if (!env) die("out of memory", "splitting env");
  size_t k = 0;
  for (size_t i = 0; i < len && k < n; k++) {
    env[k] = buf + i;
    i += strlen(buf + i) + 1;
  }
  return env;
}

struct call {
  pid_t pid;
  long long started;
  char *envbuf;
  char **env;
};

static pid_t start(const char *plugin, const char *dir, int i, struct call *c) {
  char path[4096];
  size_t len;
  snprintf(path, sizeof path, "%s/%d.env", dir, i);
  c->envbuf = slurp(path, &len);
  c->env = split_env(c->envbuf, len);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  snprintf(path, sizeof path, "%s/%d.in", dir, i);
  posix_spawn_file_actions_addopen(&fa, 0, path, O_RDONLY, 0);
  snprintf(path, sizeof path, "%s/%d.out", dir, i);
  posix_spawn_file_actions_addopen(&fa, 1, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  snprintf(path, sizeof path, "%s/%d.err", dir, i);
  posix_spawn_file_actions_addopen(&fa, 2, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

  char *argv[] = {(char *)plugin, NULL};
  c->started = now_us();
  int rc = posix_spawn(&c->pid, plugin, &fa, NULL, argv, c->env);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    die("cannot start", plugin);
  }
  return c->pid;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: cni-exec PLUGIN PARALLEL DIR COUNT\n");
    return 2;
  }
  const char *plugin = argv[1];
  int parallel = atoi(argv[2]);
  const char *dir = argv[3];
  int count = atoi(argv[4]);
  if (parallel < 1 || count < 0) {
    fprintf(stderr, "cni-exec: PARALLEL must be >= 1 and COUNT >= 0\n");
    return 2;
  }
  struct call *calls = calloc((size_t)(count > 0 ? count : 1), sizeof *calls);
  if (!calls) die("out of memory", "allocating calls");

  long long t0 = now_us();
  int next = 0, running = 0, done = 0;
  while (done < count) {
    while (running < parallel && next < count) {
      start(plugin, dir, next, &calls[next]);
      next++;
      running++;
    }
    int status;
    struct rusage ru;
    pid_t pid = wait4(-1, &status, 0, &ru);
    if (pid < 0) die("wait4 failed", "");
    long long sys = (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
    long long cpu = (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec + sys;
    long long ended = now_us();
    for (int i = 0; i < next; i++) {
      if (calls[i].pid != pid) continue;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      printf("%d %d %lld %lld %lld\n", i, code, ended - calls[i].started, cpu, sys);
      calls[i].pid = 0;
      free(calls[i].env);
      free(calls[i].envbuf);
      break;
    }
    running--;
    done++;
  }
  printf("total %lld\n", now_us() - t0);
  return 0;
}
