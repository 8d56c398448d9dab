/*
 * The pod sandbox's only process. It holds the pod's namespaces open until the runtime stops the
 * sandbox, so it must exit promptly on SIGTERM/SIGINT (as PID 1 of its PID namespace it gets no default
 * signal actions, hence the explicit handlers) and reap children that get re-parented to it.
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGINT, &stop, NULL);

  struct sigaction child = {0};
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &child, NULL);

  for (;;) pause();
}
