"""A small RWKV-style language model trained with DistributedDataParallel over NCCL, on cupy-kernels' ops or, with
--impl torch, on the same model built from torch ops (the same initial weights and data): the per-step losses of
the two should agree to float32 rounding.

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --steps 20              # ck ops
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --steps 20 --impl torch # torch ops
    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py --steps 5 --fsdp        # FSDP2 instead of DDP

The model (float32 throughout): token embedding; blocks of
  x + TimeMix(layer_norm(x)): k = exp(key), v, r = sigmoid(receptance); RWKV's weighted average over the past,
      timex(w, k v) / timex(w, k, eps), as two causal depthwise convolutions along time ((B, C, T) layout) with a
      learnable decay w of shape (C, T); then r * that, normalised in place (layer_norm_: it is a fresh
      intermediate nobody saved), and an output projection;
  x + ChannelMix(layer_norm(x)): relu(key)^2 normalised in place (rms_norm_), value, gated by sigmoid(receptance);
a final layer_norm, the head, log_softmax and the NLL loss. Rank 0 prints the per-step loss (the mean over ranks):
"step <i> loss <value>"; at the end, under DDP, the float64 sum of squares of every parameter: "params <value>"
(the mean loss hides rounding differences that the weights keep); and with --impl ck how many times each
cupy_kernels op was called.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink SHARP multicast off (the lent machines do not offer it)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the two implementations of the model's functional pieces -------------------------------------------


class CkOps:
    """cupy-kernels: custom ops with our own backward kernels; in-place norms where the input is a dead temporary."""

    def __init__(self):
        import cupy_kernels as ck

        self.ck = ck
        self.calls = dict.fromkeys(("layer_norm", "layer_norm_", "rms_norm_", "timex", "log_softmax"), 0)

    def layer_norm(self, x, w, b, eps=1e-5):
        self.calls["layer_norm"] += 1
        return self.ck.layer_norm(x, w, b, eps)

    def layer_norm_(self, x, w, b, eps=1e-5):
        self.calls["layer_norm_"] += 1
        return self.ck.layer_norm_(x, w, b, eps)

    def rms_norm_(self, x, w, eps=1e-6):
        self.calls["rms_norm_"] += 1
        return self.ck.rms_norm_(x, w, eps)

    def timex(self, w, k, eps=0.0):
        self.calls["timex"] += 1
        return self.ck.timex(w, k, eps)

    def log_softmax(self, x):
        self.calls["log_softmax"] += 1
        return self.ck.log_softmax(x, axis=-1)


class TorchOps:
    """The same from torch ops: F.layer_norm / F.rms_norm (out of place), timex as F.conv1d on a left-padded k."""

    def layer_norm(self, x, w, b, eps=1e-5):
        return F.layer_norm(x, x.shape[-1:], w, b, eps)

    layer_norm_ = layer_norm

    def rms_norm_(self, x, w, eps=1e-6):
        return F.rms_norm(x, x.shape[-1:], w, eps)

    def timex(self, w, k, eps=0.0):
        # out[b, c, t] = eps + sum_{u <= t} w[c, T-1-t+u] k[b, c, u] (cupy_kernels/ops/timex.py: reference)
        T = k.shape[-1]
        return eps + F.conv1d(F.pad(k, (T - 1, 0)), w.unsqueeze(1), groups=k.shape[1])

    def log_softmax(self, x):
        return F.log_softmax(x, dim=-1)


# ---- the model ------------------------------------------------------------------------------------------


class TimeMix(nn.Module):
    def __init__(self, ops, C, T, layer, layers):
        super().__init__()
        self.ops = ops
        self.key = nn.Linear(C, C, bias=False)
        self.value = nn.Linear(C, C, bias=False)
        self.receptance = nn.Linear(C, C, bias=False)
        self.output = nn.Linear(C, C, bias=False)
        with torch.no_grad():
            self.key.weight.mul_(0.1)  # exp(key) starts near 1
            self.output.weight.mul_(1.0 / math.sqrt(2 * layers))
        # w[c, T-1-d]: the weight of the token d steps back, exp(-decay_c d / T); decays spread over the channels
        c = torch.arange(C, dtype=torch.float64) / max(C - 1, 1)
        decay = torch.exp(-4 + 7 * c ** (0.7 + 1.3 * layer / max(layers - 1, 1)))
        d = torch.arange(T - 1, -1, -1, dtype=torch.float64)
        self.time_w = nn.Parameter(torch.exp(-decay[:, None] * d[None, :] / T).float())
        self.ln_x_weight = nn.Parameter(torch.ones(C))
        self.ln_x_bias = nn.Parameter(torch.zeros(C))

    def forward(self, x):  # (B, T, C), normalised
        T = x.shape[1]
        k = torch.exp(torch.clamp(self.key(x), max=30.0))
        v = self.value(x)
        r = torch.sigmoid(self.receptance(x))
        w = self.time_w[:, -T:]  # (C, T): a row-strided view when T is shorter than the trained context
        wkv = self.ops.timex(w, (k * v).transpose(1, 2).contiguous())
        wk = self.ops.timex(w, k.transpose(1, 2).contiguous(), 1e-6)
        y = (r * (wkv / wk).transpose(1, 2)).contiguous()
        y = self.ops.layer_norm_(y, self.ln_x_weight, self.ln_x_bias)
        return self.output(y)


class ChannelMix(nn.Module):
    def __init__(self, ops, C, layers):
        super().__init__()
        self.ops = ops
        self.key = nn.Linear(C, 4 * C, bias=False)
        self.value = nn.Linear(4 * C, C, bias=False)
        self.receptance = nn.Linear(C, C, bias=False)
        self.k_norm = nn.Parameter(torch.ones(4 * C))
        with torch.no_grad():
            self.value.weight.mul_(1.0 / math.sqrt(2 * layers))

    def forward(self, x):
        k = torch.square(torch.relu(self.key(x)))  # square saves its input, not this output: normalise in place
        k = self.ops.rms_norm_(k, self.k_norm)
        return torch.sigmoid(self.receptance(x)) * self.value(k)


class Block(nn.Module):
    def __init__(self, ops, C, T, layer, layers):
        super().__init__()
        self.ops = ops
        self.ln1_weight, self.ln1_bias = nn.Parameter(torch.ones(C)), nn.Parameter(torch.zeros(C))
        self.ln2_weight, self.ln2_bias = nn.Parameter(torch.ones(C)), nn.Parameter(torch.zeros(C))
        self.att = TimeMix(ops, C, T, layer, layers)
        self.ffn = ChannelMix(ops, C, layers)

    def forward(self, x):
        x = x + self.att(self.ops.layer_norm(x, self.ln1_weight, self.ln1_bias))
        return x + self.ffn(self.ops.layer_norm(x, self.ln2_weight, self.ln2_bias))


class RWKV(nn.Module):
    def __init__(self, ops, vocab, C, T, layers):
        super().__init__()
        self.ops = ops
        self.emb = nn.Embedding(vocab, C)
        self.blocks = nn.ModuleList([Block(ops, C, T, i, layers) for i in range(layers)])
        self.ln_out_weight, self.ln_out_bias = nn.Parameter(torch.ones(C)), nn.Parameter(torch.zeros(C))
        self.head = nn.Linear(C, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        logp = self.ops.log_softmax(self.head(self.ops.layer_norm(x, self.ln_out_weight, self.ln_out_bias)))
        return F.nll_loss(logp.reshape(-1, logp.shape[-1]), targets.reshape(-1))


# ---- data: a deterministic toy language ------------------------------------------------------------------


def batch(step, rank, B, T, vocab, device):
    """Sequences x_{t+1} = (a x_t + c) mod vocab with per-sequence (a, c) and 10% random tokens: the same for a
    (step, rank) in every run and either implementation."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    a = torch.randint(1, 8, (B, 1), generator=g)
    c = torch.randint(0, vocab, (B, 1), generator=g)
    seq = torch.empty(B, T + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, vocab, (B,), generator=g)
    for t in range(T):
        seq[:, t + 1] = (a[:, 0] * seq[:, t] + c[:, 0]) % vocab
    noise = torch.rand(B, T + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, vocab, (B, T + 1), generator=g), seq)
    return seq[:, :-1].to(device), seq[:, 1:].to(device)


# ---- training ---------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--impl", choices=("ck", "torch"), default="ck")
    p.add_argument("--fsdp", action="store_true", help="wrap with FSDP2 (fully_shard) instead of DDP")
    p.add_argument("--batch", type=int, default=16, help="sequences per rank")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args(argv)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    ops = CkOps() if args.impl == "ck" else TorchOps()
    torch.manual_seed(1234)  # the same initial weights in both implementations and on every rank
    model = RWKV(ops, args.vocab, args.dim, args.seq, args.layers).to(device)
    if args.fsdp:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError as e:
            if rank == 0:
                print(f"FSDP2: not available in torch {torch.__version__}: {e}", flush=True)
            dist.destroy_process_group()
            return 2
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.SGD(wrapped.parameters(), lr=args.lr, momentum=0.9)

    failed = None
    try:
        for step in range(args.steps):
            tokens, targets = batch(step, rank, args.batch, args.seq, args.vocab, device)
            opt.zero_grad(set_to_none=True)
            loss = wrapped(tokens, targets)
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:  # every bit of the value: the two implementations' runs must differ in rounding only
                print(f"step {step:4d} loss {float(mean) / world!r}", flush=True)
    except Exception as e:  # noqa: BLE001 (reported: whether FSDP2 works is the question --fsdp asks)
        if not args.fsdp:
            raise
        failed = f"{type(e).__name__}: {e}"
    if rank == 0 and not args.fsdp and failed is None:
        squares = sum(float(p.detach().double().square().sum()) for p in model.parameters())
        print(f"params {squares!r}", flush=True)
    if args.fsdp and rank == 0:
        print("FSDP2: works" if failed is None else f"FSDP2: fails: {failed}", flush=True)
    if rank == 0 and isinstance(ops, CkOps):
        print("cupy_kernels calls: " + " ".join(f"{op}={n}" for op, n in ops.calls.items()), flush=True)
    dist.destroy_process_group()
    return 0 if failed is None else 2


if __name__ == "__main__":
    sys.exit(main())
