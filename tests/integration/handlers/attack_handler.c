/* A test handler (tests/integration/detect_test.cc) that behaves like a compromised function on
 * request. The body is one command:
 *   ok                 normal work: answers "ok"
 *   pid                answers this process's pid (which instance served)
 *   shell              fork + execve /bin/sh -c true (a reverse shell's first step): "spawned"
 *   connect <port>     TCP connect to 127.0.0.1:<port>: "connected" or the errno text
 *   open <path>        open(path, O_RDONLY): "opened" or the errno text (the attempt is what
 * counts) child-open <path>  a forked child (another pid of the instance) opens path: "child
 * opened" or "child failed" burn <ms>          a thread spinning the CPU for <ms> ms (a miner):
 * "burning" Not for production: it exists so that the detector's tests run real attacks. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_handler.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void* burn(void* arg) {
  const double until = now_ms() + (double)(long)arg;
  volatile unsigned long x = 0;
  while (now_ms() < until) {
    for (int i = 0; i < 100000; ++i) x += (unsigned long)i;
  }
  return NULL;
}

int shoal_handle(const shoal_request* req, shoal_response* resp) {
  char cmd[256];
  read_command(req, cmd, sizeof cmd);
  char out[64];
  if (strcmp(cmd, "ok") == 0) return reply(resp, "ok");
  if (strcmp(cmd, "pid") == 0) {
    snprintf(out, sizeof out, "%d", (int)getpid());
    return reply(resp, out);
  }
  if (strcmp(cmd, "shell") == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", "true", (char*)NULL);
      _exit(127);
    }
    if (pid < 0) return reply(resp, strerror(errno));
    int status = 0;
    waitpid(pid, &status, 0);
    return reply(resp, "spawned");
  }
  if (strncmp(cmd, "connect ", 8) == 0) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(cmd + 8));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(s, (struct sockaddr*)&a, sizeof a);
    int err = errno;
    close(s);
    return reply(resp, rc == 0 ? "connected" : strerror(err));
  }
  if (strncmp(cmd, "open ", 5) == 0) {
    int fd = open(cmd + 5, O_RDONLY | O_CLOEXEC);
    int err = errno;
    if (fd >= 0) close(fd);
    return reply(resp, fd >= 0 ? "opened" : strerror(err));
  }
  if (strncmp(cmd, "child-open ", 11) == 0) {
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(cmd + 11, O_RDONLY | O_CLOEXEC);
      _exit(fd >= 0 ? 0 : 1);
    }
    if (pid < 0) return reply(resp, strerror(errno));
    int status = 0;
    waitpid(pid, &status, 0);
    return reply(resp,
                 WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "child opened" : "child failed");
  }
  if (strncmp(cmd, "burn ", 5) == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, burn, (void*)(long)atoi(cmd + 5)) != 0)
      return reply(resp, "no thread");
    pthread_detach(t);
    return reply(resp, "burning");
  }
  resp->set_error(resp->ctx, 400, "attack: unknown command");
  return 0;
}

/* shell waits for its child: not on the instance's event loop. */
int shoal_may_block(void) { return 1; }
