// The handler only writes the signal number to a non-blocking pipe; the
// supervisor reads it in its poll() loop. If the pipe were ever full, bytes are
// dropped, which is harmless: a full pipe already wakes the loop, and SIGCHLD
// handling reaps every exited child regardless of how many bytes arrived.

#include "signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fsdp_run {
namespace {

int g_pipe[2] = {-1, -1};
constexpr int kCaught[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

extern "C" void on_signal(int signo) {
  int saved_errno = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

}  // namespace

void SignalPipe::install() {
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::fprintf(stderr, "fsdp-run: pipe2() failed: %s\n", std::strerror(errno));
    std::exit(1);
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SIGCHLD for stops and continues too: see [Note: a stopped worker].
  action.sa_flags = SA_RESTART;
  for (int signo : kCaught) sigaction(signo, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int SignalPipe::read_fd() { return g_pipe[0]; }

std::vector<int> SignalPipe::drain() {
  std::vector<int> signals;
  unsigned char buffer[64];
  while (true) {
    ssize_t n = read(g_pipe[0], buffer, sizeof(buffer));
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) signals.push_back(buffer[i]);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: empty
  }
  return signals;
}

sigset_t SignalPipe::block_all() {
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &previous);
  return previous;
}

void SignalPipe::restore(const sigset_t& mask) { sigprocmask(SIG_SETMASK, &mask, nullptr); }

void SignalPipe::reset_in_child(const sigset_t& mask) {
  for (int signo : kCaught) signal(signo, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
}

}  // namespace fsdp_run
