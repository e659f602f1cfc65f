#!/usr/bin/env python3
"""fsdp-train's peer under PyTorch FSDP2: the same byte-level GPT, the same
initial weights, the same batches, the same AdamW and schedule, sharded with
torch.distributed.fsdp.fully_shard (each block a unit, then the root), so a
benchmark compares the two frameworks and nothing else.

  fsdp-run --standalone --nproc-per-node 2 -- python3 bench/peers/fsdp2_gpt.py \\
      --data tests/data/corpus.txt --layers 2 --width 32 --heads 2 --context 32 \\
      --batch 8 --steps 5 --device cpu --strategy grad-op --metrics peer.jsonl

Under any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT (fsdp-run, torchrun); alone it runs as world size 1.
--device cuda puts each rank on the GPU LOCAL_RANK names and uses NCCL;
--device cpu uses Gloo. bench/peers/head_to_head.py runs it against
fsdp-train, alternately, and prints the comparison.

What "the same" rests on (each checked by tests/test_fsdp2_peer.cpp, which
compares the step losses with fsdp-train's):
  - the model (models/gpt.cpp): modules built in the same order, so the same
    random draws, then every matrix redrawn N(0, 0.02), vectors zeroed,
    LayerNorm weights one; pre-LN blocks, exact GELU, a tied head;
  - the batches (tools/fsdp-train/corpus.cpp): row r of step s starts at
    splitmix64 of (seed, split, s, r) modulo (bytes - context); rank k of N
    trains rows [k B/N, (k+1) B/N);
  - the attention: torch's scaled_dot_product_attention with is_causal, as
    models/gpt.cpp calls on LibTorch 2.x (explicit scores, mask and softmax
    only on 1.13, where neither side has it);
  - the process: fsdp-train's threads per rank, and its heap setting
    (freed CPU memory kept for reuse, fsdp/cpu_heap.h), without which each
    CPU step faults its buffers' pages in again;
  - the optimizer (tools/fsdp-train/gpt_setup.cpp, lr_schedule.cpp): AdamW
    with betas (0.9, 0.95), eps 1e-8, weight decay on the non-norm weights
    only, linear warmup then cosine decay, the global gradient norm clipped;
    fused (AdamW(fused=True)), as fsdp-train's fsdp::FusedAdamW, unless
    --no-fused-adamw.
Initial weights match bit for bit only where this torch and fsdp-train's
LibTorch are the same release (their random kernels change between them).

Writes one JSON object per step to --metrics (rank 0), with fsdp-train's
metrics.jsonl names: step, loss, ms, tokens_per_s, and for CUDA
peak_device_allocated_bytes / peak_device_reserved_bytes (per rank). With
--hook-times, as fsdp-train --hook-times: hook_us (per rank, the wall time
inside FSDP2's hooks this step) and hook_us_by_range (rank 0's, by hook).
"""

import argparse
import functools
import json
import math
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
PRESETS = {  # tools/fsdp-train/model_presets.cpp
    "gpt2-small-bytes": dict(layers=12, width=768, heads=12, context=1024),
    "gpt-1b": dict(layers=20, width=2048, heads=16, context=1024),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--data", required=True, help="text file (90%% train, last 10%% validation)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named size; size flags win")
    p.add_argument("--layers", type=int, help="transformer blocks (default 4, as fsdp-train)")
    p.add_argument("--width", type=int, help="d_model (default 128)")
    p.add_argument("--heads", type=int, help="attention heads (default 4)")
    p.add_argument("--context", type=int, help="bytes per window (default 128)")
    p.add_argument("--batch", type=int, default=32, help="global batch (sequences per step)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps; the schedule spans them")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=3e-4, help="where the cosine decay ends")
    p.add_argument("--warmup", type=int, help="default: 50, or steps/10 if smaller")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="0 turns clipping off")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--mixed-precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--strategy", choices=["full", "grad-op"], default="full",
                   help="full: reshard after forward (ZeRO-3, fsdp-train's full); grad-op: keep "
                        "the gathered parameters until backward (ZeRO-2, fsdp-train's grad-op)")
    p.add_argument("--activation-checkpointing", choices=["none", "all"], default="none")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--metrics", help="JSON lines, one per step (rank 0)")
    p.add_argument("--fused-adamw", action=argparse.BooleanOptionalAction, default=True,
                   help="AdamW(fused=True), one kernel per step, as fsdp-train's "
                        "fsdp::FusedAdamW (default); --no-fused-adamw for the for-each one")
    p.add_argument("--compile", choices=["inductor", "aot_eager"],
                   help="run each block under torch.compile(fullgraph=True) with this backend, "
                        "before fully_shard, as torchtitan does ([Note: compiled blocks])")
    p.add_argument("--hook-times", action="store_true",
                   help="time the wall time inside FSDP2's hooks each step, as fsdp-train "
                        "--hook-times does libfsdp's")
    p.add_argument("--stop-after", type=int,
                   help="train only through this step of the --steps schedule (default: all)")
    p.add_argument("--save-dcp", metavar="DIR",
                   help="at the end, save the model and AdamW state with PyTorch's Distributed "
                        "Checkpoint, as an FSDP2 loop does (fsdp-ckpt import-dcp reads it)")
    p.add_argument("--load-dcp", metavar="DIR",
                   help="first load a DCP checkpoint (fsdp-ckpt export-dcp writes one) and "
                        "continue after its optimizer step")
    a = p.parse_args(argv)
    sizes = dict(layers=4, width=128, heads=4, context=128)  # fsdp-train's defaults
    sizes.update(PRESETS.get(a.preset, {}))
    for name, value in sizes.items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    if a.warmup is None:
        a.warmup = min(50, max(1, a.steps // 10))
    if a.stop_after is None:
        a.stop_after = a.steps
    if a.device == "cpu" and a.strategy == "full" and torch_release() < (2, 7):
        # [Note: FSDP2's full resharding on the CPU]
        # Under torch 2.6 the backward re-gather writes the parameters in
        # place and bumps the version of the weights autograd saved in
        # forward, so backward fails ("modified by an inplace operation",
        # AddmmBackward0). grad-op keeps them gathered and runs.
        p.error(f"--strategy full does not run on the CPU under torch {torch.__version__}: FSDP2's "
                "backward re-gather invalidates the weights autograd saved; pass --strategy "
                "grad-op (and compare with fsdp-train --strategy grad-op), or run on CUDA")
    return a


def torch_release():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


# ---- the batches: tools/fsdp-train/corpus.cpp -------------------------------

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class Sampler:
    def __init__(self, path, context, seed):
        data = open(path, "rb").read()
        split = int(len(data) * 0.9)
        self.parts = {"train": data[:split], "val": data[split:]}
        self.context, self.seed = context, seed

    def start(self, split, index, row):
        n = len(self.parts[split])
        h = splitmix64(self.seed)
        h = splitmix64(h ^ (0x7472 if split == "train" else 0x76616C))
        h = splitmix64(h ^ (index & MASK64))
        h = splitmix64(h ^ (row & MASK64))
        return h % (n - self.context)

    def rows(self, split, index, first_row, rows):
        data, t = self.parts[split], self.context
        windows = [data[s:s + t + 1] for s in
                   (self.start(split, index, first_row + r) for r in range(rows))]
        w = torch.tensor([list(x) for x in windows], dtype=torch.long)
        return w[:, :t].contiguous(), w[:, 1:].contiguous()


# ---- the model: models/gpt.cpp ---------------------------------------------

class Attention(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1))

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        # models/gpt.cpp's [Note: attention with SDPA]; the mask buffer stays
        # for the same state dict.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, context)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)
        self.recompute = False

    def body(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.fc_proj(F.gelu(self.fc(self.ln2(h))))

    def forward(self, x):
        if self.recompute and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint
            return checkpoint(self.body, x, use_reentrant=False)
        return self.body(x)


class GPT(nn.Module):
    def __init__(self, layers, d, heads, context, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        with torch.no_grad():  # init_gpt_module, module by module in the same order
            for module in list(self.modules())[1:]:
                for name, p in module.named_parameters(recurse=False):
                    if isinstance(module, nn.LayerNorm):
                        p.fill_(1.0) if name == "weight" else p.zero_()
                    elif p.dim() >= 2:
                        p.normal_(0.0, 0.02)
                    else:
                        p.zero_()

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def parameter_count(a):
    d = a.width
    return 256 * d + a.context * d + a.layers * (12 * d * d + 13 * d) + 2 * d


# ---- training ---------------------------------------------------------------

def lr_at(a, step):
    if a.warmup > 0 and step <= a.warmup:
        return a.lr * step / a.warmup
    decay = a.steps - a.warmup
    if decay <= 0:
        return a.lr
    progress = min(max((step - a.warmup) / decay, 0.0), 1.0)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model, a):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if name.endswith(".weight") and "ln" not in name else no_decay).append(p)
    groups = [dict(params=decay, weight_decay=a.weight_decay),
              dict(params=no_decay, weight_decay=0.0)]
    return torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=a.fused_adamw)


def make_fsdp2_run_on_cpu():
    """FSDP2 orders its collectives with stream events; torch 2.6's CPU stream
    has no record_event / wait_event (no-ops from torch 2.7 on, pytorch#145935).
    Where they are missing, the same no-ops: CPU work runs in program order."""
    stream = torch.cpu.Stream
    if not hasattr(stream, "record_event"):
        stream.record_event = lambda self, event=None: torch.cpu.Event()
    if not hasattr(stream, "wait_event"):
        stream.wait_event = lambda self, event: None


class HookTimes:
    """The wall time inside FSDP2's hooks, hook by hook, on every thread.

    [Note: timing FSDP2's hooks as libfsdp's]
    fsdp::HookTimer sums libfsdp's hook ranges, named as FSDP2 names its own;
    this times the FSDP2 methods those names stand for: FSDPState's forward
    pre- and post-hooks, its pre-backward tensor hook and end-of-backward
    callback, and FSDPParamGroup.post_backward (run by the autograd node on
    a unit's inputs). Each whole method is timed, from entry to return, as
    the ranges cover libfsdp's whole hook methods, and only the outermost
    call on a thread counts (the end-of-backward callback runs post_backward
    itself), as in fsdp::HookTimer. The wrappers replace the class methods
    before fully_shard registers the bound methods as hooks.
    """

    HOOKS = (("FSDPState", "_pre_forward", "pre_forward"),
             ("FSDPState", "_post_forward", "post_forward"),
             ("FSDPState", "_pre_backward", "pre_backward"),
             ("FSDPParamGroup", "post_backward", "post_backward"),
             ("FSDPState", "_root_post_backward_final_callback", "root_post_backward_callback"))

    def __init__(self):
        self.totals = {}  # hook -> seconds, in the order first seen
        self.lock = threading.Lock()
        self.depth = threading.local()

    def install(self):
        classes = fsdp2_hook_classes()
        for owner, method, name in self.HOOKS:
            cls = classes[owner]
            setattr(cls, method, self.timed(getattr(cls, method), name))

    def timed(self, method, name):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            depth = getattr(self.depth, "n", 0)
            self.depth.n = depth + 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.depth.n = depth
                if depth == 0:
                    elapsed = time.perf_counter() - start
                    with self.lock:
                        self.totals[name] = self.totals.get(name, 0.0) + elapsed
        return wrapper

    def take(self):
        """Seconds per hook since the last take(); restarts from zero."""
        with self.lock:
            out, self.totals = self.totals, {}
        return out


def fsdp2_hook_classes():
    """FSDPState and FSDPParamGroup, wherever this torch keeps them."""
    import importlib
    for package in ("torch.distributed.fsdp._fully_shard",  # torch 2.6+
                    "torch.distributed._composable.fsdp"):  # torch 2.4, 2.5
        try:
            state = importlib.import_module(package + "._fsdp_state")
            group = importlib.import_module(package + "._fsdp_param_group")
        except ImportError:
            continue
        classes = dict(FSDPState=getattr(state, "FSDPState", None),
                       FSDPParamGroup=getattr(group, "FSDPParamGroup", None))
        missing = [f"{cls}.{method}" for cls, method, _ in HookTimes.HOOKS
                   if not hasattr(classes[cls], method)]
        if missing:
            sys.exit(f"fsdp2_gpt: --hook-times: torch {torch.__version__}'s FSDP2 has no "
                     f"{', '.join(missing)}; run without --hook-times")
        return classes
    sys.exit(f"fsdp2_gpt: --hook-times: no FSDP2 state module in torch {torch.__version__}; "
             "run without --hook-times")


def shard(model, a, device):
    """fully_shard each block, then the root (embeddings, ln_f, the tied head).

    [Note: compiled blocks]
    With --compile each block is replaced by torch.compile(block) first, and
    the compiled module is the unit, as torchtitan's apply_compile and
    apply_fsdp do: FSDP2's hooks run eagerly around the compiled forward,
    and every block shares one compiled graph (the blocks' code is the
    same). The parameter names gain "_orig_mod." and keep their endings, so
    the optimizer groups are the same; the first steps compile (--skip in
    head_to_head.py leaves them out of the timing)."""
    if device.type == "cpu":
        make_fsdp2_run_on_cpu()
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4 and 2.5 kept FSDP2 under _composable
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mp = MixedPrecisionPolicy()
    if a.mixed_precision == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, block in enumerate(model.blocks):
        block.recompute = a.activation_checkpointing == "all"
        if a.compile:
            block = model.blocks[i] = torch.compile(block, backend=a.compile, fullgraph=True)
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=a.strategy == "full")
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=a.strategy == "full")
    return model


def peak_resident_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def per_rank(value, device):
    t = torch.tensor([value], dtype=torch.long, device=device)
    out = torch.empty(dist.get_world_size(), dtype=torch.long, device=device)
    dist.all_gather_into_tensor(out, t)
    return out.tolist()


def init_distributed(a):
    # Debian's torch is built without libuv, which TCPStore asks for by default.
    os.environ.setdefault("USE_LIBUV", "0")
    alone = "RANK" not in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if a.device == "cuda" else torch.device("cpu")
    backend = "nccl" if a.device == "cuda" else "gloo"
    if a.device == "cuda":
        torch.cuda.set_device(device)
    if alone:  # a world of one over an in-memory store, as fsdp-train alone
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group(backend)
    return device


def keep_freed_cpu_memory():
    """fsdp::keep_freed_cpu_memory() (fsdp/cpu_heap.h), which fsdp-train calls
    at startup: glibc keeps freed buffers in the heap instead of returning
    them to the kernel, so a step does not fault their pages in again. The
    same mallopt calls; False where the C library is not glibc."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    # The mmap threshold first: setting either turns off glibc's adaptive one.
    return mallopt(m_mmap_threshold, 1 << 30) == 1 and mallopt(m_trim_threshold, 2**31 - 1) == 1


def threads_per_rank():
    """fsdp-train's policy: ranks on one machine share its cores."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    return max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def train_step(model, optimizer, batch, a, step, device):
    """One optimizer step as fsdp-train takes it; returns the global mean loss."""
    for group in optimizer.param_groups:
        group["lr"] = lr_at(a, step)
    optimizer.zero_grad(set_to_none=False)
    inputs, targets = batch
    logits = model(inputs.to(device)).float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip if a.clip > 0 else math.inf)
    optimizer.step()
    total = loss.detach().double().reshape(1)
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


def save_dcp(model, optimizer, path):
    """The model and optimizer state as FSDP2 loops save them (torchtitan's layout)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)


def load_dcp(model, optimizer, path):
    """Loads a DCP checkpoint's model and optimizer state; returns its step.
    [Note: loading optimizer state without param_groups]
    A libfsdp checkpoint holds tensors, not hyperparameters, so an exported
    one has no param_groups: the state tensors are loaded and this run keeps
    its own groups (docs/checkpoints.md)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.load({"model": model_sd, "optim": {"state": optim_sd["state"]}}, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
    return max(int(s["step"]) for s in optimizer.state.values())


def step_record(a, step, loss, seconds, device, hooks):
    """The step's line of --metrics, with fsdp-train's names (collective).
    `hooks`: this step's seconds per hook, or None without --hook-times."""
    record = dict(step=step, loss=loss, ms=1e3 * seconds,
                  tokens_per_s=a.batch * a.context / seconds,
                  peak_resident_bytes=per_rank(peak_resident_bytes(), device))
    if hooks is not None:
        record["hook_us"] = per_rank(round(1e6 * sum(hooks.values())), device)
        record["hook_us_by_range"] = {name: 1e6 * s for name, s in hooks.items()}
    if device.type == "cuda":
        record["peak_device_allocated_bytes"] = per_rank(
            torch.cuda.max_memory_allocated(device), device)
        record["peak_device_reserved_bytes"] = per_rank(
            torch.cuda.max_memory_reserved(device), device)
    return record


def train(a):
    torch.set_num_threads(threads_per_rank())
    keep_freed_cpu_memory()  # as fsdp-train's ranks do at startup
    device = init_distributed(a)
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        sys.exit(f"fsdp2_gpt: --batch {a.batch} is not divisible by the world size {world}")
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.width, a.heads, a.context).to(device)  # built on the CPU, then moved
    hook_times = HookTimes() if a.hook_times else None
    if hook_times:
        hook_times.install()  # before fully_shard registers the hooks
    shard(model, a, device)
    optimizer = make_optimizer(model, a)
    sampler = Sampler(a.data, a.context, a.seed)
    per = a.batch // world
    out = open(a.metrics, "w") if a.metrics and rank == 0 else None
    if rank == 0:
        print(f"fsdp2_gpt: GPT {a.layers}x{a.width}, {parameter_count(a) / 1e6:.2f} M parameters, "
              f"{world} rank(s) on {device.type}, {a.mixed_precision}, torch {torch.__version__}",
              flush=True)
    first = load_dcp(model, optimizer, a.load_dcp) + 1 if a.load_dcp else 1
    for step in range(first, a.stop_after + 1):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        batch = sampler.rows("train", step, rank * per, per)  # rank k's rows of the global batch
        loss = train_step(model, optimizer, batch, a, step, device)
        seconds = time.perf_counter() - start
        hooks = hook_times.take() if hook_times else None
        record = step_record(a, step, loss, seconds, device, hooks)
        if out:
            out.write(json.dumps(record) + "\n")
            out.flush()
        if rank == 0:
            print(f"step {step}/{a.steps}  loss {loss:.4f}  {record['ms']:.1f} ms", flush=True)
    if a.save_dcp:
        save_dcp(model, optimizer, a.save_dcp)
    dist.destroy_process_group()


if __name__ == "__main__":
    train(parse_args())
