// The supervisor's single-threaded poll() loop. One thread means no locks, and
// every write to our stdout/stderr comes from here, one whole line at a time.
// See [Note: stop policy] in supervisor.h.

#include "supervisor.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <vector>

#include "line_prefixer.h"
#include "signal_pipe.h"
#include "worker_env.h"
#include "worker_process.h"

extern char** environ;

namespace fsdp_run {
namespace {

using Clock = std::chrono::steady_clock;

// After the last worker exits, how long to wait for its output pipes to
// close. Only a process that left the worker's group (setsid) can hold one.
constexpr std::chrono::seconds kDrainTimeout{2};

const char* signal_name(int signo) {
  switch (signo) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return "unknown signal";
  }
}

// One output stream of one worker, on its way to our stdout or stderr.
struct OutputStream {
  int fd = -1;       // pipe read end; -1 when not captured or closed
  int sink_fd = -1;  // STDOUT_FILENO or STDERR_FILENO
  LinePrefixer prefixer{""};
};

struct Worker {
  WorkerPlace place;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  std::optional<Clock::time_point> stopped_since;  // while stopped by a signal
  bool start_failed = false;  // reported at spawn; its exit is not news
  OutputStream out, err;
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& opts, std::string program_path, AttemptInfo attempt,
             GroupWatcher* watcher)
      : opts_(opts),
        program_path_(std::move(program_path)),
        attempt_(std::move(attempt)),
        watcher_(watcher) {}

  JobOutcome run() {
    start_workers();
    while (true) {
      if (running_count() == 0) {
        if (!drain_deadline_) drain_deadline_ = Clock::now() + kDrainTimeout;
        if (open_stream_count() == 0) break;
        if (Clock::now() >= *drain_deadline_) {
          abandon_open_streams();
          break;
        }
      }
      wait_for_events();
      for (int signo : SignalPipe::drain()) on_signal(signo);
      stop_stalled_workers();
      if (stopping_ && !sigkill_sent_ && Clock::now() >= kill_deadline_) on_grace_expired();
    }
    for (Worker& w : workers_) {
      finish_stream(w.out);
      finish_stream(w.err);
    }
    if (failed_at_) {
      outcome_.stop_seconds = std::chrono::duration<double>(Clock::now() - *failed_at_).count();
    }
    return outcome_;
  }

 private:
  // ---- starting ---------------------------------------------------------
  void start_workers() {
    workers_.resize(static_cast<size_t>(opts_.nproc_per_node));
    for (int i = 0; i < opts_.nproc_per_node; ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      w.place = place_of(opts_, i);
      std::string prefix = opts_.prefix_output ? fmt::format("[rank {}] ", w.place.rank) : "";
      w.out.prefixer = LinePrefixer(prefix);
      w.err.prefixer = LinePrefixer(prefix);
      w.out.sink_fd = STDOUT_FILENO;
      w.err.sink_fd = STDERR_FILENO;
      if (stopping_) continue;  // an earlier rank failed to start

      SpawnRequest request;
      request.path = program_path_;
      request.argv = opts_.command;
      request.env = worker_environment(opts_, w.place, attempt_, environ);
      request.capture_output = opts_.prefix_output;
      request.data_limit_bytes = opts_.memory_limit_bytes;
      SpawnedWorker spawned = spawn_worker(request);
      w.pid = spawned.pid;
      w.running = spawned.pid > 0;
      w.out.fd = spawned.stdout_fd;
      w.err.fd = spawned.stderr_fd;
      if (!spawned.error.empty()) {
        w.start_failed = true;
        outcome_.start_failed = true;
        int code = spawned.exec_errno == ENOENT ? 127 : spawned.exec_errno != 0 ? 126 : 1;
        fail(fmt::format("could not start rank {}: {}", w.place.rank, spawned.error), code,
             {w.place.rank, "could not be started", {}});
      }
    }
  }

  // ---- the loop -----------------------------------------------------------
  void wait_for_events() {
    std::vector<pollfd> fds;
    std::vector<OutputStream*> streams;
    fds.push_back({SignalPipe::read_fd(), POLLIN, 0});
    const std::vector<int> watched = watcher_ != nullptr ? watcher_->fds() : std::vector<int>{};
    for (int fd : watched) fds.push_back({fd, POLLIN, 0});
    const size_t first_stream = fds.size();
    for (Worker& w : workers_) {
      for (OutputStream* s : {&w.out, &w.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    int rc = poll(fds.data(), fds.size(), poll_timeout_ms());
    if (rc < 0) {
      if (errno == EINTR) return;
      say(fmt::format("poll() failed: {}", std::strerror(errno)));
      std::abort();  // cannot supervise any more; the death signal stops the workers
    }
    for (size_t i = first_stream; i < fds.size(); ++i) {
      if (fds[i].revents != 0) pump(*streams[i - first_stream]);
    }
    const bool watched_ready = std::any_of(fds.begin() + 1, fds.begin() + first_stream,
                                           [](const pollfd& p) { return p.revents != 0; });
    if (watched_ready) {
      const std::string why = watcher_->check();
      if (!why.empty()) stop_from_outside(why);
    }
  }

  int poll_timeout_ms() const {
    std::optional<Clock::time_point> next = earliest_stall_deadline();
    if (stopping_ && !sigkill_sent_ && (!next || kill_deadline_ < *next)) next = kill_deadline_;
    if (drain_deadline_ && (!next || *drain_deadline_ < *next)) next = drain_deadline_;
    if (!next) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60'000));
  }

  // ---- output -------------------------------------------------------------
  void pump(OutputStream& s) {
    char buffer[64 * 1024];
    ssize_t n = read(s.fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {  // EOF (or a read error, which ends the stream all the same)
      finish_stream(s);
      return;
    }
    std::string lines;
    s.prefixer.feed(std::string_view(buffer, static_cast<size_t>(n)), lines);
    emit(s.sink_fd, lines);
  }

  void finish_stream(OutputStream& s) {
    if (s.fd < 0) return;
    std::string tail;
    s.prefixer.finish(tail);
    emit(s.sink_fd, tail);
    close(s.fd);
    s.fd = -1;
  }

  // A sink that failed (reader gone) is dropped; we keep draining the pipes
  // so workers never block on a full pipe.
  void emit(int sink_fd, const std::string& data) {
    if (data.empty()) return;
    bool& broken = sink_fd == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    if (!broken && !write_all(sink_fd, data)) broken = true;
  }

  int open_stream_count() const {
    int count = 0;
    for (const Worker& w : workers_) count += (w.out.fd >= 0) + (w.err.fd >= 0);
    return count;
  }

  void abandon_open_streams() {
    for (Worker& w : workers_) {
      if (w.out.fd >= 0 || w.err.fd >= 0) {
        say(fmt::format("rank {} exited but its output is still held open by a process that "
                        "left its process group; not waiting for it",
                        w.place.rank));
      }
    }
  }

  // ---- signals and exits ----------------------------------------------------
  void on_signal(int signo) {
    if (signo == SIGCHLD) {
      note_stops_and_continues();
      reap_exited();
      return;
    }
    outcome_.interrupted = true;  // never restarted: see [Note: restarts] in restarts.h
    int alive = running_count();
    if (!stopping_) {
      outcome_.launcher_signal = signo;
      say(fmt::format("got {}; forwarding it to {} worker(s), SIGKILL in {} s", signal_name(signo),
                      alive, opts_.grace_period_s));
      begin_stop(signo);
    } else if (!sigkill_sent_ && alive > 0) {
      say(fmt::format("got {} again; sending SIGKILL to {} worker(s)", signal_name(signo), alive));
      kill_running(SIGKILL);
      sigkill_sent_ = true;
    }
  }

  // [Note: a stopped worker]
  // A worker stopped by a signal (SIGSTOP, or SIGTSTP/SIGTTIN with no one to
  // continue it) makes no progress and never exits: its peers wait in a
  // collective or in the rendezvous until their own timeouts, and a peer
  // stuck where there is none (TCPStore's waits) waits forever. The kernel
  // tells the parent about stops (SIGCHLD, waitid WSTOPPED), so fsdp-run
  // watches its workers directly, for any program and with no heartbeat to
  // send: one stopped for longer than the communication timeout (--timeout,
  // else FSDP_COMM_TIMEOUT, else 300 s) is named and SIGKILLed, and the job
  // is stopped as for a failed worker, and fsdp-run exits 128+9 as for any
  // worker killed by SIGKILL. A worker continued in time is left alone; a
  // worker that is alive but stuck is its peers' timeouts' to find.
  void note_stops_and_continues() {
    while (true) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WSTOPPED | WCONTINUED | WNOHANG) != 0) return;  // ECHILD
      if (info.si_pid == 0) return;
      Worker* w = find_worker(info.si_pid);
      if (w == nullptr) continue;
      if (info.si_code == CLD_STOPPED) w->stopped_since = Clock::now();
      if (info.si_code == CLD_CONTINUED) w->stopped_since.reset();
    }
  }

  Clock::duration stall_timeout() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(opts_.stall_timeout_s));
  }

  std::optional<Clock::time_point> earliest_stall_deadline() const {
    std::optional<Clock::time_point> earliest;
    for (const Worker& w : workers_) {
      if (!w.running || !w.stopped_since) continue;
      const auto deadline = *w.stopped_since + stall_timeout();
      if (!earliest || deadline < *earliest) earliest = deadline;
    }
    return earliest;
  }

  void stop_stalled_workers() {
    for (Worker& w : workers_) {
      if (!w.running || !w.stopped_since || Clock::now() < *w.stopped_since + stall_timeout()) {
        continue;
      }
      w.stopped_since.reset();
      kill(-w.pid, SIGKILL);  // a stopped process acts on nothing gentler
      fail_with_running(
          w,
          fmt::format("rank {} (pid {}) has been stopped by a signal for {} s, longer than the "
                      "timeout (--timeout or FSDP_COMM_TIMEOUT); killed it",
                      w.place.rank, w.pid, opts_.stall_timeout_s),
          128 + SIGKILL, {w.place.rank, "was stopped by a signal for longer than the timeout", {}});
    }
  }

  // fail() for a worker that is killed but not yet reaped: it is not one of
  // "the other" workers to stop.
  void fail_with_running(Worker& culprit, const std::string& what, int code,
                         const WorkerFailure& cause) {
    culprit.running = false;
    fail(what, code, cause);
    culprit.running = true;  // reaped, and its exit ignored, as we are stopping
  }

  // waitid(WNOWAIT) first: the worker stays a zombie, so its pid (= its
  // process group id) is still reserved while we kill its leftovers.
  void reap_exited() {
    while (true) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return;  // ECHILD
      pid_t pid = info.si_pid;
      if (pid == 0) return;
      Worker* w = find_worker(pid);
      if (w != nullptr) kill(-pid, SIGKILL);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (w != nullptr) on_worker_exit(*w, status);
    }
  }

  void on_worker_exit(Worker& w, int status) {
    w.running = false;
    if (w.start_failed) return;
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || stopping_) return;  // exits we caused are not news
    std::string how;
    int code = 1;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      how = fmt::format("exited with code {}", code);
    } else if (WIFSIGNALED(status)) {
      int sig = WTERMSIG(status);
      code = 128 + sig;
      how = fmt::format("was killed by signal {} ({}){}", sig, signal_name(sig),
                        WCOREDUMP(status) ? ", core dumped" : "");
    }
    fail(fmt::format("rank {} (pid {}) {}", w.place.rank, w.pid, how), code,
         {w.place.rank, how, {}});
  }

  // The first failure decides the exit code and stops the others.
  void fail(const std::string& what, int code, const WorkerFailure& cause) {
    if (stopping_) {
      say(what);
      return;
    }
    outcome_.exit_code = code;
    outcome_.failure = cause;
    outcome_.failure->at = std::chrono::system_clock::now();
    failed_at_ = Clock::now();
    int others = running_count();
    if (others > 0) {
      say(fmt::format("{}; stopping the other {} worker(s)", what, others));
    } else {
      say(what);
    }
    begin_stop(SIGTERM);
  }

  // Another node ended the round: not a failure of ours, so no exit code.
  void stop_from_outside(const std::string& why) {
    if (stopping_) return;
    outcome_.stopped_from_outside = why;
    failed_at_ = Clock::now();
    say(fmt::format("{}; stopping this node's {} worker(s)", why, running_count()));
    begin_stop(SIGTERM);
  }

  void begin_stop(int signo) {
    stopping_ = true;
    kill_running(signo);
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(opts_.grace_period_s));
  }

  void on_grace_expired() {
    sigkill_sent_ = true;
    std::string ranks;
    for (const Worker& w : workers_) {
      if (w.running) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", w.place.rank);
    }
    if (ranks.empty()) return;
    say(fmt::format("rank(s) {} still running {} s after being told to stop; sending SIGKILL",
                    ranks, opts_.grace_period_s));
    kill_running(SIGKILL);
  }

  void kill_running(int signo) {
    for (const Worker& w : workers_) {
      if (w.running) kill(-w.pid, signo);
    }
  }

  int running_count() const {
    return static_cast<int>(
        std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }));
  }

  Worker* find_worker(pid_t pid) {
    for (Worker& w : workers_) {
      if (w.pid == pid) return &w;
    }
    return nullptr;
  }

  const LaunchOptions& opts_;
  std::string program_path_;
  AttemptInfo attempt_;
  GroupWatcher* watcher_;                       // nullptr: only the workers end the group
  std::optional<Clock::time_point> failed_at_;  // the first failure, for stop_seconds
  std::vector<Worker> workers_;
  JobOutcome outcome_;
  bool stopping_ = false;
  bool sigkill_sent_ = false;
  Clock::time_point kill_deadline_{};
  std::optional<Clock::time_point> drain_deadline_;
  bool stdout_broken_ = false;
  bool stderr_broken_ = false;
};

}  // namespace

JobOutcome supervise_workers(const LaunchOptions& opts, const std::string& program_path,
                             const AttemptInfo& attempt, GroupWatcher* watcher) {
  return Supervisor(opts, program_path, attempt, watcher).run();
}

}  // namespace fsdp_run
