#pragma once
// The end-of-run plot: loss (train, smoothed train, validation) and
// throughput over steps, as <run-dir>/plot.png, drawn by gnuplot, with a
// dashed vertical line where each restart resumed. The data
// (plot.tsv, plot-val.tsv) and the script (plot.gp) stay next to it, so the
// plot can be redrawn or restyled with `cd <run-dir> && gnuplot plot.gp`.

#include <string>
#include <vector>

#include "metrics_log.h"

namespace fsdp_train {

struct PlotResult {
  bool ok = false;
  std::string png;    // the plot, when ok
  std::string error;  // why there is none, with the fix, when not ok
};

// Uses gnuplot's pngcairo terminal when it has one, else its png terminal.
PlotResult write_plot(const std::string& run_dir, const std::vector<StepRecord>& records,
                      const std::vector<RestartMarker>& restarts, const std::string& title);

}  // namespace fsdp_train
