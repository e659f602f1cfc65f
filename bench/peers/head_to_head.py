#!/usr/bin/env python3
"""libfsdp against PyTorch FSDP2 on the same machine, in the same run.

Runs fsdp-train and its FSDP2 peer (fsdp2_gpt.py: the same GPT, initial
weights, batches and optimizer) under fsdp-run, alternately (ABBA order, so
a drift of the machine's speed hits both), --rounds times each, and prints
for each: the median step time (steps after --skip, over every round),
tokens/s, MFU (GPU), peak memory, the framework's own time per unit (inside
its hooks: fsdp-train --hook-times and fsdp2_gpt.py --hook-times, [Note:
timing FSDP2's hooks as libfsdp's] there) and the ratios libfsdp / FSDP2. It also
checks that the two agree on the loss of the first steps (same initial
weights and batches: within 1e-4 relative in fp32, 2e-2 in bf16) and exits 1
when they do not.

Two more sides join the rounds when asked, each with its column and ratio:
  --compiled-peer   FSDP2 with each block under torch.compile, as torchtitan
                    runs it (fsdp2_gpt.py --compile; inductor by default);
  --no-fsdp         the same GPT trained without FSDP in LibTorch (local-gpt,
                    bench/peers/local_gpt.cpp): the limit at world size 1.

  python3 bench/peers/head_to_head.py --bin build/bin --device cuda \\
      --preset gpt2-small-bytes --batch 8 --mixed-precision bf16 --rounds 3

[Note: what the FLOPs count]
A step is counted as 6 x parameters x tokens (forward and backward of every
weight) plus the attention scores and their weighted sum: 12 x layers x
context x width per token, as in PaLM's MFU (Chowdhery et al. 2022,
appendix B). Activation recomputation is not counted: MFU measures useful
work. The H200's peak is its dense bf16 tensor rate, 989.5 TFLOPS (NVIDIA's
H200 datasheet lists 1,979 TFLOPS with 2:4 sparsity; dense is half);
--peak-tflops gives another GPU's.
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "fsdp2_gpt.py")
sys.path.insert(0, HERE)
from fsdp2_gpt import PRESETS, parameter_count  # noqa: E402  the sizes both sides share

H200_BF16_DENSE_TFLOPS = 989.5


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--bin", required=True, help="directory holding fsdp-run and fsdp-train")
    p.add_argument("--work", default="head-to-head", help="run dirs and logs go here")
    p.add_argument("--nproc", type=int, default=1, help="ranks (one GPU each with cuda)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=12, help="steps per run")
    p.add_argument("--skip", type=int, default=2, help="first steps of a run left out of timing")
    p.add_argument("--data", default=os.path.join(HERE, "..", "..", "tests", "data", "corpus.txt"))
    p.add_argument("--preset", choices=sorted(PRESETS))
    p.add_argument("--layers", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--context", type=int)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--strategy", choices=["full", "grad-op"], default="full")
    p.add_argument("--mixed-precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--activation-checkpointing", choices=["none", "all"], default="none")
    p.add_argument("--no-hook-times", dest="hook_times", action="store_false",
                   help="do not time the frameworks' hooks (timing adds a few microseconds "
                        "per unit to each step on both sides)")
    p.add_argument("--compiled-peer", nargs="?", const="inductor", choices=["inductor", "aot_eager"],
                   help="also run FSDP2 with each block under torch.compile (this backend; "
                        "default inductor, aot_eager checks the wiring where inductor cannot "
                        "build)")
    p.add_argument("--no-fsdp", action="store_true",
                   help="also run the GPT without FSDP (local-gpt from --bin), world size 1 only")
    p.add_argument("--peak-tflops", type=float,
                   help=f"the GPU's dense peak for MFU (default with cuda: H200 bf16, "
                        f"{H200_BF16_DENSE_TFLOPS})")
    a = p.parse_args(argv)
    sizes = dict(layers=4, width=128, heads=4, context=128)
    sizes.update(PRESETS.get(a.preset, {}))
    for name, value in sizes.items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    if a.peak_tflops is None and a.device == "cuda":
        a.peak_tflops = H200_BF16_DENSE_TFLOPS
    if a.no_fsdp and a.nproc != 1:
        p.error(f"--no-fsdp trains in one process; it compares at --nproc 1, not {a.nproc}")
    if a.skip >= a.steps:
        p.error(f"--skip {a.skip} leaves no step of --steps {a.steps} to time; "
                "pass a smaller --skip")
    return a


def model_flags(a):
    """What every side takes: the model, the batches, the schedule, the device."""
    return ["--data", a.data, "--layers", str(a.layers), "--width", str(a.width),
            "--heads", str(a.heads), "--context", str(a.context), "--batch", str(a.batch),
            "--steps", str(a.steps), "--mixed-precision", a.mixed_precision,
            "--activation-checkpointing", a.activation_checkpointing, "--device", a.device]


def fsdp_flags(a):
    """What the FSDP sides take besides: the strategy and the hook timer."""
    return (model_flags(a) + ["--strategy", a.strategy]
            + (["--hook-times"] if a.hook_times else []))


class RunFailed(Exception):
    """A side's program exited non-zero; the message holds its command and output."""


def launch(a, worker, log):
    command = [os.path.join(a.bin, "fsdp-run"), "--standalone", "--nproc-per-node", str(a.nproc),
               "--"] + worker
    with open(log, "w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise RunFailed(f"`{' '.join(command)}` failed ({result.returncode}); "
                        f"its output:\n{open(log).read()[-4000:]}")


def run_libfsdp(a, tag):
    run_dir = os.path.join(a.work, f"libfsdp-{tag}")
    launch(a, [os.path.join(a.bin, "fsdp-train")] + fsdp_flags(a) +
           ["--eval-every", "0", "--sample-bytes", "0", "--quiet", "--run-dir", run_dir],
           os.path.join(a.work, f"libfsdp-{tag}.log"))
    return read_lines(os.path.join(run_dir, "metrics.jsonl"))


def run_fsdp2(a, tag, compile_backend=None):
    name = f"fsdp2-compiled-{tag}" if compile_backend else f"fsdp2-{tag}"
    metrics = os.path.join(a.work, f"{name}.jsonl")
    compile_flags = ["--compile", compile_backend] if compile_backend else []
    launch(a, [sys.executable, PEER] + fsdp_flags(a) + compile_flags + ["--metrics", metrics],
           os.path.join(a.work, f"{name}.log"))
    return read_lines(metrics)


def run_no_fsdp(a, tag):
    metrics = os.path.join(a.work, f"no-fsdp-{tag}.jsonl")
    launch(a, [os.path.join(a.bin, "local-gpt")] + model_flags(a) + ["--metrics", metrics],
           os.path.join(a.work, f"no-fsdp-{tag}.log"))
    return read_lines(metrics)


class Side:
    """One program in the rounds: its column title, how to run it, whether
    it has FSDP hooks to time, and its runs so far. An optional side that
    fails is left out of the rest (failed says why); libfsdp and FSDP2 are
    the comparison itself, so their failure ends the run."""

    def __init__(self, title, run, has_hooks, optional=False):
        self.title, self.run, self.has_hooks, self.optional = title, run, has_hooks, optional
        self.runs, self.failed = [], None


def make_sides(a):
    """libfsdp first (every ratio is libfsdp's over another side's), then FSDP2."""
    sides = [Side("libfsdp", run_libfsdp, True), Side("FSDP2", run_fsdp2, True)]
    if a.compiled_peer:
        sides.append(Side("FSDP2 compiled",
                          functools.partial(run_fsdp2, compile_backend=a.compiled_peer), True,
                          optional=True))
    if a.no_fsdp:
        sides.append(Side("no FSDP", run_no_fsdp, False, optional=True))
    return sides


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_flops(a):
    tokens = a.batch * a.context
    return 6 * parameter_count(a) * tokens + 12 * a.layers * a.context * a.width * tokens


def hook_figures(a, name, timed):
    """The median timed step's hook time per unit, of the slowest rank, and
    rank 0's by hook (a hook a step did not run counts zero there)."""
    units = a.layers + 1  # the blocks and the root, on both sides
    if any("hook_us" not in r for r in timed):
        sys.exit(f"head_to_head: {name} was asked for --hook-times but its metrics carry no "
                 "hook_us; pass --no-hook-times to compare without them")
    hooks = list(dict.fromkeys(hook for r in timed for hook in r["hook_us_by_range"]))
    by_range = {hook: statistics.median(r["hook_us_by_range"].get(hook, 0.0) for r in timed)
                / units for hook in hooks}
    slowest = statistics.median(max(r["hook_us"]) for r in timed)
    return dict(hook_us_per_unit=slowest / units, hook_by_range=by_range)


def summarize(a, side):
    """The figures of one side over all its rounds."""
    runs = side.runs
    timed = [r for run in runs for r in run[a.skip:]]
    times = [r["ms"] / 1e3 for r in timed]
    step_s = statistics.median(times)
    peak = lambda key: max((max(r.get(key) or [0]) for run in runs for r in run), default=0)
    out = dict(step_s=step_s, tokens_per_s=a.batch * a.context / step_s,
               resident=peak("peak_resident_bytes"),
               allocated=peak("peak_device_allocated_bytes"),
               reserved=peak("peak_device_reserved_bytes"))
    if a.peak_tflops:
        out["mfu"] = step_flops(a) / step_s / (a.nproc * a.peak_tflops * 1e12)
    if a.hook_times and side.has_hooks:
        out.update(hook_figures(a, side.title, timed))
    return out


def loss_agreement(a, ours, theirs):
    """The largest relative difference of the first steps' losses."""
    steps = min(5, len(ours), len(theirs))
    pairs = zip(ours[:steps], theirs[:steps])
    worst = max(abs(o["loss"] - t["loss"]) / abs(t["loss"]) for o, t in pairs)
    bound = 2e-2 if a.mixed_precision == "bf16" else 1e-4
    return steps, worst, bound


def gib(n):
    return f"{n / 2**30:.2f} GiB" if n else "-"


def print_table(a, sides, figures):
    rows = [("median step", lambda s: f"{1e3 * s['step_s']:.1f} ms", "step_s"),
            ("tokens/s", lambda s: f"{s['tokens_per_s']:,.0f}", "tokens_per_s")]
    if a.peak_tflops:
        rows.append(("MFU", lambda s: f"{100 * s['mfu']:.1f}%", "mfu"))
    if a.device == "cuda":
        rows += [("peak CUDA allocated", lambda s: gib(s["allocated"]), "allocated"),
                 ("peak CUDA reserved", lambda s: gib(s["reserved"]), "reserved")]
    rows.append(("peak resident (VmHWM)", lambda s: gib(s["resident"]), "resident"))
    if a.hook_times:
        rows.append(("hooks per unit", lambda s: f"{s['hook_us_per_unit']:.1f} us",
                     "hook_us_per_unit"))
    print(f"\nGPT {a.layers}x{a.width}, {a.heads} heads, context {a.context}, "
          f"{parameter_count(a) / 1e6:.2f} M parameters; batch {a.batch}; {a.nproc} rank(s) on "
          f"{a.device}; {a.strategy}, {a.mixed_precision}, "
          f"checkpointing {a.activation_checkpointing}; {a.rounds} rounds of {a.steps} steps, "
          f"the first {a.skip} of each untimed")
    lib = figures[0]
    ratio_titles = [f"libfsdp/{side.title}" for side in sides[1:]]
    widths = [max(16, len(title) + 2) for title in ratio_titles]
    print(f"{'':<24}" + "".join(f"{side.title:>16}" for side in sides)
          + "".join(f"{title:>{w}}" for title, w in zip(ratio_titles, widths)))
    for name, show, key in rows:
        cells = [show(f) if key in f else "-" for f in figures]
        ratios = [lib[key] / f[key] if f.get(key) else float("nan") for f in figures[1:]]
        print(f"{name:<24}" + "".join(f"{c:>16}" for c in cells)
              + "".join(f"{r:>{w}.3f}" for r, w in zip(ratios, widths)))
    if a.hook_times:
        print_hook_breakdown(a, sides, figures)


def print_hook_breakdown(a, sides, figures):
    """Each framework's hooks per unit, by hook (rank 0, median timed step)."""
    print(f"hooks per unit: the median timed step's wall time inside the framework's hooks "
          f"over its {a.layers + 1} units (blocks and root), slowest rank; "
          + ("the CPU cost of enqueuing work" if a.device == "cuda"
             else "on the CPU this includes waiting for collectives"))
    for side, f in zip(sides, figures):
        if side.has_hooks:
            hooks = ", ".join(f"{hook} {us:.1f}" for hook, us in f["hook_by_range"].items())
            print(f"  {side.title:<8} rank 0 by hook, us per unit: {hooks}")


def print_agreement(a, sides):
    """Each side's first losses against libfsdp's; True when all agree."""
    all_agree = True
    for side in sides[1:]:
        steps, worst, bound = loss_agreement(a, sides[0].runs[0], side.runs[0])
        verdict = "agree" if worst <= bound else "DISAGREE"
        all_agree = all_agree and worst <= bound
        print(f"loss of the first {steps} steps, {side.title} against libfsdp: largest relative "
              f"difference {worst:.2e} (bound {bound:.0e}): {verdict}")
    return all_agree


def run_rounds(a, sides):
    for r in range(a.rounds):  # ABBA: the order reverses every round
        for side in (sides if r % 2 == 0 else sides[::-1]):
            if side.failed:
                continue
            print(f"round {r + 1}/{a.rounds}: {side.title}", flush=True)
            try:
                side.runs.append(side.run(a, r + 1))
            except RunFailed as e:
                if not side.optional:
                    sys.exit(f"head_to_head: {side.title}: {e}")
                side.failed = str(e)
                print(f"head_to_head: {side.title} left out: {e}", flush=True)


def main():
    a = parse_args()
    os.makedirs(a.work, exist_ok=True)
    sides = make_sides(a)
    run_rounds(a, sides)
    ran = [side for side in sides if not side.failed]
    print_table(a, ran, [summarize(a, side) for side in ran])
    agree = print_agreement(a, ran)
    for side in sides:
        if side.failed:
            print(f"{side.title}: FAILED, left out (its error is above)")
    return 0 if agree and len(ran) == len(sides) else 1


if __name__ == "__main__":
    sys.exit(main())
