#!/usr/bin/env python3
"""fsdp-ckpt's bridge to PyTorch Distributed Checkpoint (DCP): run by
`fsdp-ckpt import-dcp` and `fsdp-ckpt export-dcp` on the user's own
PyTorch, since DCP's .metadata file is a Python pickle.

  dcp_convert.py to-safetensors DCP_DIR OUT.safetensors [--model-key K] [--optim-key K]
  dcp_convert.py from-safetensors IN.safetensors DCP_DIR [--model-key K] [--optim-key K]

The safetensors file is the one `fsdp-ckpt consolidate` writes and
`fsdp-ckpt import` reads: every tensor whole, a parameter or buffer under
its name, optimizer state as "optim/<param>/<field>" with an I64 scalar
"step", and __metadata__ "libfsdp_step" and "libfsdp_extras".

The DCP side is what an FSDP2 loop saves and loads:

  model_sd, optim_sd = get_state_dict(model, optimizer)   # torch.distributed.checkpoint.state_dict
  dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=DIR)

--model-key and --optim-key name those two entries (a dotted path, e.g.
app.model for a Stateful "app"). Optimizer state must be keyed by
parameter name, as get_state_dict keys it. param_groups (learning rates,
betas...) are the training script's, not the checkpoint's: they are not
imported, and an export holds none, so load one with
  dcp.load({"model": model_sd, "optim": {"state": optim_sd["state"]}}, checkpoint_id=DIR)
and keep the run's own param_groups (docs/checkpoints.md).

Both directions hold every tensor in memory at once. Exit status: 0 done,
1 an error (said on stderr), 2 a usage error, 3 no usable PyTorch.
"""

import argparse
import json
import os
import shutil
import struct
import sys
import warnings

NO_TORCH = 3
# DCP's own reads call TypedStorage, which warns on every call in torch 2.x.
warnings.filterwarnings("ignore", message="TypedStorage is deprecated")

try:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
except ImportError as e:
    sys.stderr.write(f"dcp_convert: PyTorch 2.3 or newer is needed to read and write DCP "
                     f"checkpoints, and python3 could not import it ({e}). Install PyTorch for "
                     f"this python3 (Debian: python3-torch), or give fsdp-ckpt --python a "
                     f"python3 that has it\n")
    sys.exit(NO_TORCH)

# safetensors dtype names (docs/checkpoint-format.md, section 2)
DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
          "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class ConvertError(Exception):
    pass


# ---- safetensors, as docs/checkpoint-format.md describes it -----------------

def write_safetensors(path, tensors, metadata):
    """tensors: [(name, tensor)], written in order, through a temporary file."""
    header, offset, blobs = {}, 0, []
    for name, t in tensors:
        if t.dtype not in DTYPE_NAMES:
            raise ConvertError(f"'{name}' has dtype {t.dtype}, which a libfsdp checkpoint "
                               f"cannot hold (supported: {', '.join(DTYPES)})")
        data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def read_safetensors(path):
    """([(name, tensor)] in file order, __metadata__)."""
    with open(path, "rb") as f:
        content = f.read()
    if len(content) < 8:
        raise ConvertError(f"'{path}' is not a safetensors file (it has {len(content)} bytes)")
    (length,) = struct.unpack("<Q", content[:8])
    header = json.loads(content[8:8 + length])
    metadata = header.pop("__metadata__", {})
    base = 8 + length
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"][0])
    tensors = []
    for name, e in entries:
        begin, end = e["data_offsets"]
        dtype = DTYPES[e["dtype"]]
        flat = (torch.frombuffer(bytearray(content[base + begin:base + end]), dtype=dtype)
                if end > begin else torch.empty(0, dtype=dtype))
        tensors.append((name, flat.reshape(e["shape"])))
    return tensors, metadata


# ---- DCP -> libfsdp ----------------------------------------------------------

def entry_at(state, dotted, what, flag):
    """state[a][b]... for dotted "a.b", naming what is there when it fails."""
    node = state
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            there = sorted(node) if isinstance(node, dict) else type(node).__name__
            raise ConvertError(f"the checkpoint has no {what} at '{dotted}' (at '{part}' it has "
                               f"{there}); pass {flag} with the key it was saved under")
        node = node[part]
    return node


def optimizer_tensors(optim, model_names):
    """[("optim/<param>/<field>", tensor)], and the steps seen."""
    state = optim.get("state") if isinstance(optim, dict) else None
    if not isinstance(state, dict):
        raise ConvertError("the optimizer entry has no 'state' dict: save the optimizer with "
                           "torch.distributed.checkpoint.state_dict.get_state_dict")
    out, steps = [], set()
    for param, fields in state.items():
        if not isinstance(param, str):
            raise ConvertError(f"the optimizer state is keyed by parameter index ({param!r}), as "
                               "a plain optimizer.state_dict() keys it; libfsdp names state by "
                               "parameter: save it with torch.distributed.checkpoint.state_dict."
                               "get_state_dict(model, optimizer)")
        if param not in model_names:
            raise ConvertError(f"the optimizer has state for '{param}', which is not a tensor of "
                               "the model entry")
        for field, value in fields.items():
            if field == "step":
                step = float(value.item() if torch.is_tensor(value) else value)
                if step != int(step) or step < 0:
                    raise ConvertError(f"'{param}' has optimizer step {step}, not a step count")
                steps.add(int(step))
                value = torch.tensor(int(step), dtype=torch.int64)
            elif not torch.is_tensor(value):
                raise ConvertError(f"'{param}' has optimizer field '{field}' = {value!r}, not a "
                                   "tensor; libfsdp checkpoints hold tensors only")
            out.append((f"optim/{param}/{field}", value))
    return out, steps


def to_safetensors(a):
    staged = f"{a.output}.dcp-{os.getpid()}.pt"
    try:
        dcp_to_torch_save(a.input, staged)  # every tensor whole, the state dict nested again
        state = torch.load(staged, weights_only=True)
    finally:
        if os.path.exists(staged):
            os.remove(staged)
    model = entry_at(state, a.model_key, "model entry", "--model-key")
    tensors = []
    for name, value in model.items():
        if not torch.is_tensor(value):
            raise ConvertError(f"the model entry's '{name}' is a {type(value).__name__}, not a "
                               "tensor; libfsdp checkpoints hold tensors only")
        tensors.append((name, value))
    steps = set()
    if a.optim_key:
        optim = entry_at(state, a.optim_key, "optimizer entry", "--optim-key (or '' for none)")
        optim_tensors, steps = optimizer_tensors(optim, set(model))
        tensors += optim_tensors
    extras = {"imported_from": "torch-dcp", "source": os.path.abspath(a.input)}
    write_safetensors(a.output, tensors, {"libfsdp_step": str(max(steps, default=0)),
                                          "libfsdp_extras": json.dumps(extras)})
    print(f"dcp_convert: {len(tensors)} tensors, step {max(steps, default=0)}")


# ---- libfsdp -> DCP ----------------------------------------------------------

def nested(state, dotted, value):
    """Sets state[a][b]... = value for dotted "a.b"."""
    *parents, last = dotted.split(".")
    for part in parents:
        state = state.setdefault(part, {})
    state[last] = value


def from_safetensors(a):
    if os.path.exists(a.output):
        raise ConvertError(f"'{a.output}' exists; remove it, or choose another output directory")
    tensors, _ = read_safetensors(a.input)
    model, optim_state = {}, {}
    for name, t in tensors:
        if name.startswith("optim/") and name.count("/") >= 2:
            param, field = name[len("optim/"):].rsplit("/", 1)
            if field == "step":  # torch's optimizers keep the step as a float tensor
                t = t.to(torch.float32).reshape(())
            optim_state.setdefault(param, {})[field] = t
        else:
            model[name] = t
    state = {}
    nested(state, a.model_key, model)
    if optim_state and a.optim_key:
        nested(state, a.optim_key, {"state": optim_state})
    partial = f"{a.output}.partial-{os.getpid()}"
    try:
        dcp.save(state, storage_writer=dcp.FileSystemWriter(partial))
        os.replace(partial, a.output)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"dcp_convert: {len(tensors)} tensors")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("command", choices=["to-safetensors", "from-safetensors"])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--model-key", default="model", help="where the model's state dict is")
    p.add_argument("--optim-key", default="optim",
                   help="where the optimizer's state dict is; '' for none")
    a = p.parse_args(argv)
    try:
        (to_safetensors if a.command == "to-safetensors" else from_safetensors)(a)
    except (ConvertError, OSError, RuntimeError, ValueError) as e:
        sys.stderr.write(f"dcp_convert: {a.command} '{a.input}': {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
