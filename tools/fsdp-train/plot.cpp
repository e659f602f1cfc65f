#include "plot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "output_file.h"

namespace fsdp_train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScript = R"gp(# Redraw with: gnuplot plot.gp   (written by fsdp-train)
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1000,720 font "sans,10"
} else {
  set terminal png size 1000,720
}
set output "plot.png"
set multiplot layout 2,1 title "{title}"
set grid
set key top right
set ylabel "loss (nats/byte)"
set lmargin 12
{restart_lines}plot "plot.tsv" using 1:2 with lines lc rgb "#b0c4de" title "train (per step)", \
     "plot.tsv" using 1:4 with lines lw 2 lc rgb "#1f4e9a" title "train (smoothed)"{val_plot}
set ylabel "tokens/s (all ranks)"
set xlabel "step"
set key bottom right
plot "plot.tsv" using 1:3 with lines lw 1.5 lc rgb "#2a8a3a" title "throughput"
unset multiplot
)gp";

std::string escape_title(const std::string& title) {
  std::string out;
  for (char c : title) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Runs `gnuplot plot.gp` in `dir`, its output going to plot.log there.
// Returns "" on success, else why not.
std::string run_gnuplot(const std::string& dir) {
  const std::string log = (fs::path(dir) / "plot.log").string();
  const pid_t pid = ::fork();
  if (pid < 0) return fmt::format("fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    const int fd = ::open("plot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execlp("gnuplot", "gnuplot", "plot.gp", static_cast<char*>(nullptr));
    ::_exit(errno == ENOENT ? 127 : 126);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return fmt::format("waitpid failed: {}", std::strerror(errno));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return "gnuplot is not installed; install it with `make deps` (or `apt-get install "
           "gnuplot-nox`), then run `gnuplot plot.gp` in the run dir";
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fmt::format("gnuplot failed (see {})", log);
  }
  return "";
}

// plot.tsv: step, loss, throughput and the smoothed loss.
std::string loss_table(const std::vector<StepRecord>& records) {
  std::string tsv = "# step\tloss\ttokens_per_s\tloss_smoothed\n";
  // Exponential moving average with bias correction (as Adam's moments).
  double ema = 0;
  int64_t n = 0;
  for (const auto& r : records) {
    ema = 0.95 * ema + 0.05 * r.loss;
    ++n;
    const double smoothed = ema / (1.0 - std::pow(0.95, static_cast<double>(n)));
    tsv += fmt::format("{}\t{}\t{}\t{}\n", r.step, r.loss, r.tokens_per_s, smoothed);
  }
  return tsv;
}

// plot-val.tsv: the steps that evaluated, and their validation loss.
std::string validation_table(const std::vector<StepRecord>& records) {
  std::string val = "# step\tval_loss\n";
  for (const auto& r : records) {
    if (r.val_loss) val += fmt::format("{}\t{}\n", r.step, *r.val_loss);
  }
  return val;
}

// A dashed vertical line, in both panels, at the step each restart resumed
// after, labelled with its number.
std::string restart_lines(const std::vector<RestartMarker>& restarts) {
  std::string lines;
  for (const RestartMarker& r : restarts) {
    lines += fmt::format(
        "set arrow from first {0}, graph 0 to first {0}, graph 1 nohead dt 2 lw 1.5 "
        "lc rgb \"#7f7f7f\"\n"
        "set label \"restart {1}\" at first {0}, graph 0.97 offset 0.5,0 font \",8\" "
        "tc rgb \"#7f7f7f\"\n",
        r.after_step, r.restart);
  }
  return lines;
}

}  // namespace

PlotResult write_plot(const std::string& run_dir, const std::vector<StepRecord>& records,
                      const std::vector<RestartMarker>& restarts, const std::string& title) {
  PlotResult result;
  if (records.empty()) {
    result.error = "no steps were recorded";
    return result;
  }
  const std::string tsv = loss_table(records);
  const std::string val = validation_table(records);
  const bool any_val = val.find('\n') + 1 < val.size();  // a line below the header
  std::string script = kScript;
  const auto replace = [&script](const std::string& key, const std::string& value) {
    const size_t at = script.find(key);
    if (at != std::string::npos) script.replace(at, key.size(), value);
  };
  replace("{title}", escape_title(title));
  replace("{restart_lines}", restart_lines(restarts));
  replace("{val_plot}", any_val ? ", \\\n     \"plot-val.tsv\" using 1:2 with linespoints pt 7 ps 0.8 "
                                  "lw 2 lc rgb \"#c0392b\" title \"validation\""
                                : "");
  try {  // [Note: a failed write is an error]: reported in the summary
    write_output_file((fs::path(run_dir) / "plot.tsv").string(), tsv);
    write_output_file((fs::path(run_dir) / "plot-val.tsv").string(), val);
    write_output_file((fs::path(run_dir) / "plot.gp").string(), script);
  } catch (const std::exception& e) {
    result.error = e.what();
    return result;
  }
  const std::string png = (fs::path(run_dir) / "plot.png").string();
  std::error_code ec;
  fs::remove(png, ec);
  result.error = run_gnuplot(run_dir);
  if (result.error.empty()) {
    if (fs::file_size(png, ec) > 0 && !ec) {
      result.ok = true;
      result.png = png;
    } else {
      result.error = fmt::format("gnuplot ran but wrote no {} (see {}/plot.log)", png, run_dir);
    }
  }
  return result;
}

}  // namespace fsdp_train
