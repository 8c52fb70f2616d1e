/* A test handler (tests/integration/sandbox_test.cc) that reports what its sandbox lets it do.
 * The body is one command:
 *   status             this process's /proc/self/status, then "--- cgroup", /proc/self/cgroup
 *   open <path>        open(path, O_RDWR): "ok" or the errno name
 *   shm <name>         shm_open(name, O_RDWR): "ok" or the errno name
 *   kill <pid>         kill(pid, 0): "ok" or the errno name
 *   unshare            unshare(CLONE_NEWUSER): a syscall the seccomp filter denies (kills it)
 * Not for production: it exists to show the sandbox from the inside. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_handler.h"

static size_t append_file(char* buf, size_t at, size_t cap, const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return at;
  ssize_t n;
  while (at < cap && (n = read(fd, buf + at, cap - at)) > 0) at += (size_t)n;
  close(fd);
  return at;
}

static const char* errno_name(int err) {
  switch (err) {
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case ESRCH:
      return "ESRCH";
    default:
      return strerror(err);
  }
}

int shoal_handle(const shoal_request* req, shoal_response* resp) {
  char cmd[512];
  read_command(req, cmd, sizeof cmd);
  char out[16384];
  if (strcmp(cmd, "status") == 0) {
    size_t at = append_file(out, 0, sizeof out - 16, "/proc/self/status");
    at += (size_t)snprintf(out + at, 16, "--- cgroup\n");
    at = append_file(out, at, sizeof out, "/proc/self/cgroup");
    return reply_bytes(resp, out, at);
  }
  int rc = -1;
  if (strncmp(cmd, "open ", 5) == 0) {
    rc = open(cmd + 5, O_RDWR | O_CLOEXEC);
  } else if (strncmp(cmd, "shm ", 4) == 0) {
    rc = shm_open(cmd + 4, O_RDWR, 0);
  } else if (strncmp(cmd, "kill ", 5) == 0) {
    rc = kill((pid_t)atoi(cmd + 5), 0);
  } else if (strcmp(cmd, "unshare") == 0) {
    rc = unshare(CLONE_NEWUSER);
  } else {
    resp->set_error(resp->ctx, 400, "probe: unknown command");
    return 0;
  }
  const char* text = rc >= 0 ? "ok" : errno_name(errno);
  if (rc > 0 && strncmp(cmd, "kill ", 5) != 0) close(rc);
  return reply(resp, text);
}

/* Answers at once: run inline on the instance's event loop. */
int shoal_may_block(void) { return 0; }
