#!/usr/bin/env python3
"""dlrm_torch.py -- the PyTorch peer of bench/train.c (docs/BENCH_TRAIN.md).

    python3 bench/peers/dlrm_torch.py [options] FILE [FILE ...]

FILE: batch files written by `bench_train --data-dir DIR` (DIR/train_b<B>.bin;
layout in bench/train.c and docs/BENCH_TRAIN.md). The model is the same as
rap's: one nn.EmbeddingBag(mode="sum") per table (rows from the file's
header), bottom MLP ND-512-256-128 (ReLU after every layer, as the dlrm
reference), dot interaction (torch.bmm, strictly lower triangle in row-major
order), top MLP 506-1024-1024-512-256-1 (ReLU after every layer but the
last), BCEWithLogitsLoss (mean), torch.optim.SGD(lr=0.1) (--optimizer adagrad: Adagrad lr 0.1). Weights are
initialised as the dlrm reference does.

Variants tried for every batch size and precision (the best one is
reported as the peer's number):
  eager-sparse   EmbeddingBag(sparse=True), sparse-aware SGD for the tables
  eager-dense    EmbeddingBag(sparse=False): dense table gradients
  compile-sparse eager sparse embeddings, torch.compile of the dense part
                 (bottom MLP, interaction, top MLP, loss; forward and backward)
  compile-ro-sparse  the same with mode="reduce-overhead" (CUDA graphs)
  graph-dense    the whole step (dense grads) captured as one CUDA graph of K steps
  graph-sparse   the same with sparse grads (usually not capturable)
fp32 runs with TF32 matmuls; bf16 runs under torch.autocast(bfloat16) with
float32 master weights. Timing: warm-up steps, then timed steps cycling
through the K batches, a CUDA event pair around each step, medians.
samples/s = B / median step time. Results go to stdout and, rewritten after
each measurement, to --json FILE.
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn as nn

MAGIC = b"RAPTRN1\0"
BOT = [512, 256, 128]
TOP = [1024, 1024, 512, 256, 1]
T_START = time.time()


def log(msg):
    print(f"[dlrm_torch {time.time() - T_START:7.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- data

def read_file(path):
    """Returns dict(B, K, ND, T, D, rows, batches=[(label, dense, ids)], sums)."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size < 128 or raw[:8].tobytes() != MAGIC:
        raise SystemExit(f"{path}: not a bench_train batch file (expected magic RAPTRN1)")
    w = np.frombuffer(raw, dtype="<i8", count=16)
    version, hb, K, B, ND, T, D, seed = (int(x) for x in w[1:9])
    if version != 1:
        raise SystemExit(f"{path}: version {version}, expected 1")
    rows = np.frombuffer(raw, dtype="<i8", count=T, offset=128).copy()
    rec = B * 4 * (1 + ND) + T * B * 8
    if raw.size != hb + K * rec:
        raise SystemExit(f"{path}: {raw.size} bytes, expected {hb + K * rec} "
                         f"(header {hb} + {K} x {rec})")
    batches = []
    ids_sum = 0
    label_sum = 0.0
    for k in range(K):
        base = hb + k * rec
        label = np.frombuffer(raw, dtype="<f4", count=B, offset=base).copy()
        dense = np.frombuffer(raw, dtype="<f4", count=B * ND, offset=base + 4 * B).copy().reshape(B, ND)
        ids = np.frombuffer(raw, dtype="<i8", count=T * B, offset=base + 4 * B * (1 + ND)).copy().reshape(T, B)
        if ids.min() < 0 or (ids >= rows[:, None]).any():
            raise SystemExit(f"{path}: batch {k}: ids out of range of the tables")
        ids_sum += int(ids.sum())
        label_sum += float(label.sum())
        batches.append((label, dense, ids))
    return dict(path=path, B=B, K=K, ND=ND, T=T, D=D, seed=seed, rows=rows, batches=batches,
                ids_sum=ids_sum, label_sum=label_sum)


# ---------------------------------------------------------------- model

def mlp(n_in, widths, relu_last):
    layers = []
    for i, w in enumerate(widths):
        lin = nn.Linear(n_in, w, bias=True)
        with torch.no_grad():  # dlrm reference initialisation
            lin.weight.normal_(0.0, math.sqrt(2.0 / (n_in + w)))
            lin.bias.normal_(0.0, math.sqrt(1.0 / w))
        layers.append(lin)
        if i < len(widths) - 1 or relu_last:
            layers.append(nn.ReLU())
        n_in = w
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, rows, D, ND, device):
        super().__init__()
        self.D = D
        self.emb_l = nn.ModuleList()
        for r in rows:
            e = nn.EmbeddingBag(int(r), D, mode="sum", sparse=True, device=device)
            with torch.no_grad():
                b = math.sqrt(1.0 / float(r))
                e.weight.uniform_(-b, b)
            self.emb_l.append(e)
        self.bot_l = mlp(ND, BOT, relu_last=True).to(device)
        F = len(rows) + 1
        self.top_l = mlp(D + F * (F - 1) // 2, TOP, relu_last=False).to(device)
        li, lj = torch.tril_indices(F, F, offset=-1)  # (1,0), (2,0), (2,1), ...
        self.register_buffer("tri", (li * F + lj).to(device), persistent=False)
        self.loss_fn = nn.BCEWithLogitsLoss()

    def set_sparse(self, sparse):
        for e in self.emb_l:
            e.sparse = sparse

    def embed(self, ids, offsets):
        return [e(ids[t], offsets) for t, e in enumerate(self.emb_l)]

    def dense_part(self, dense, ly, label):
        x = self.bot_l(dense)
        B = x.shape[0]
        T = torch.cat([x] + ly, dim=1).view(B, -1, self.D)
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        Zflat = torch.index_select(Z.flatten(1), 1, self.tri)
        R = torch.cat([x, Zflat.to(x.dtype)], dim=1)
        logit = self.top_l(R).squeeze(1)
        return self.loss_fn(logit.float(), label)


def make_optimizers(model, device, name="sgd"):
    """SGD (or Adagrad) lr 0.1 for the tables (sparse-aware) and for the MLPs
    (fused when possible)."""
    emb = [p for e in model.emb_l for p in e.parameters()]
    dense = list(model.bot_l.parameters()) + list(model.top_l.parameters())
    if name == "adagrad":
        cls, kw = torch.optim.Adagrad, dict(lr=0.1, eps=1e-8, initial_accumulator_value=0.0)
    else:
        cls, kw = torch.optim.SGD, dict(lr=0.1)
    opt_emb = cls(emb, **kw)
    opt_dense = None
    if device.type == "cuda":
        try:
            opt_dense = cls(dense, fused=True, **kw)
        except Exception as e:  # no fused version of this optimizer here
            log(f"fused {name} not available ({e}); using foreach")
    if opt_dense is None:
        opt_dense = cls(dense, **kw)
    return [opt_emb, opt_dense]


# ---------------------------------------------------------------- timing

class Runner:
    def __init__(self, args, model, opts, device):
        self.args = args
        self.model = model
        self.opts = opts
        self.device = device
        self.dense_fn = model.dense_part
        self.ro = False

    def autocast(self, prec):
        if prec == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return torch.autocast(device_type=self.device.type, enabled=False)

    def zero(self):
        for o in self.opts:
            o.zero_grad(set_to_none=True)

    def step(self, b, prec, ev=None):
        """One training step on batch b = (label, dense, ids, offsets); ev: 4 events or None."""
        label, dense, ids, offsets = b
        if ev:
            ev[0].record()
        self.zero()
        if self.ro:
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast(prec):
            ly = self.model.embed(ids, offsets)
            loss = self.dense_fn(dense, ly, label)
        if ev:
            ev[1].record()
        loss.backward()
        if ev:
            ev[2].record()
        for o in self.opts:
            o.step()
        if ev:
            ev[3].record()
        return loss

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def time_eager(self, data, prec, steps, warmup):
        K = len(data)
        loss = None
        for i in range(max(warmup, 1)):
            loss = self.step(data[i % K], prec)
        self.sync()
        loss_first = float(loss.detach())
        if self.device.type == "cuda":
            evs = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(steps)]
            for i in range(steps):
                loss = self.step(data[i % K], prec, evs[i])
            self.sync()
            step_ms = [evs[i][0].elapsed_time(evs[i][3]) for i in range(steps)]
            ph = [[evs[i][p].elapsed_time(evs[i][p + 1]) for i in range(steps)] for p in range(3)]
            loop_ms = evs[0][0].elapsed_time(evs[-1][3]) / steps
        else:
            step_ms, ph = [], [[], [], []]
            t_loop = time.perf_counter()
            for i in range(steps):
                t0 = time.perf_counter()
                loss = self.step(data[i % K], prec)
                step_ms.append((time.perf_counter() - t0) * 1e3)
            loop_ms = (time.perf_counter() - t_loop) * 1e3 / steps
        loss_last = float(loss.detach())
        med = float(np.median(step_ms))
        phases = {n: float(np.median(p)) if p else 0.0
                  for n, p in zip(("forward", "backward", "optimizer"), ph)}
        return dict(step_ms=med, loop_ms=loop_ms, phase_ms=phases,
                    loss_first=loss_first, loss_last=loss_last)

    def time_graph(self, data, prec, steps, warmup):
        """The K steps captured as one CUDA graph; step = replay / K."""
        K = len(data)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(max(warmup, 3)):
                loss = self.step(data[i % K], prec)
        torch.cuda.current_stream().wait_stream(s)
        self.sync()
        loss_first = float(loss.detach())
        g = torch.cuda.CUDAGraph()
        self.zero()
        with torch.cuda.graph(g):
            for k in range(K):
                static_loss = self.step(data[k], prec)
        reps = max(7, (steps + K - 1) // K)
        g.replay()
        self.sync()
        t = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            t.append(e0.elapsed_time(e1) / K)
        loss_last = float(static_loss.detach())
        del g
        return dict(step_ms=float(np.median(t)), loop_ms=float(np.mean(t)), phase_ms={},
                    loss_first=loss_first, loss_last=loss_last, note=f"{K} steps per graph, {reps} replays")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--variants", default="eager-sparse,eager-dense,compile-sparse,graph-dense,compile-ro-sparse,graph-sparse")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA graph variants")
    ap.add_argument("--budget", type=float, default=210.0,
                    help="seconds: optional variants are skipped once they would not fit")
    ap.add_argument("--compile-budget", type=float, default=120.0,
                    help="seconds of compiling in all, after which compile variants are skipped")
    ap.add_argument("--optimizer", choices=("sgd", "adagrad"), default="sgd")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()

    use_cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if use_cuda else "cpu")
    log(f"torch {torch.__version__}, device {torch.cuda.get_device_name() if use_cuda else 'cpu'}")
    if use_cuda:
        # best float32 settings: TF32 on the tensor cores
        for fn in (lambda: torch.set_float32_matmul_precision("high"),
                   lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
                   lambda: setattr(torch.backends.cudnn, "allow_tf32", True)):
            try:
                fn()
            except Exception as e:
                log(f"TF32 setting failed: {e}")
    precs = [p.strip() for p in args.precision.split(",") if p.strip()]
    for p in precs:
        if p not in ("fp32", "bf16"):
            raise SystemExit(f"--precision {p}: expected fp32 or bf16")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.no_compile or not use_cuda:
        variants = [v for v in variants if not v.startswith("compile")]
    if args.no_graph or not use_cuda:
        variants = [v for v in variants if not v.startswith("graph") and v != "compile-ro-sparse"]

    files = [read_file(f) for f in args.files]
    files.sort(key=lambda f: f["B"])
    f0 = files[0]
    for f in files[1:]:
        if f["ND"] != f0["ND"] or f["D"] != f0["D"] or not np.array_equal(f["rows"], f0["rows"]):
            raise SystemExit(f"{f['path']}: tables differ from {f0['path']}")
    log(f"read {len(files)} file(s): batches {[f['B'] for f in files]}, K={f0['K']}, "
        f"{f0['T']} tables, {int(f0['rows'].sum())} rows, dim {f0['D']}, {args.optimizer} lr 0.1")

    t0 = time.time()
    torch.manual_seed(1)
    model = DLRM(f0["rows"], f0["D"], f0["ND"], device)
    opts = make_optimizers(model, device, args.optimizer)
    if use_cuda:
        torch.cuda.synchronize()
    create_s = time.time() - t0
    log(f"model created in {create_s:.1f} s")
    runner = Runner(args, model, opts, device)

    # device copies of every batch: (label, dense, ids (T, B), offsets)
    dev_data = {}
    for f in files:
        offsets = torch.arange(f["B"], dtype=torch.int64, device=device)
        dev_data[f["B"]] = [(torch.from_numpy(l).to(device), torch.from_numpy(d).to(device),
                             torch.from_numpy(i).to(device), offsets) for (l, d, i) in f["batches"]]

    out = dict(bench="torch", torch=torch.__version__, device="gpu" if use_cuda else "cpu",
               gpu=torch.cuda.get_device_name() if use_cuda else "", steps=args.steps,
               warmup=args.warmup, k=f0["K"], create_s=create_s, optimizer=args.optimizer,
               files=[dict(path=f["path"], batch=f["B"], ids_sum=f["ids_sum"], label_sum=f["label_sum"])
                      for f in files],
               results=[], best=[])

    def write():
        best = {}
        for r in out["results"]:
            if r.get("error") or not r.get("step_ms"):
                continue
            key = (r["batch"], r["precision"])
            if key not in best or r["step_ms"] < best[key]["step_ms"]:
                best[key] = r
        out["best"] = [dict(batch=b, precision=p, variant=r["variant"], step_ms=r["step_ms"],
                            samples_per_s=r["samples_per_s"]) for (b, p), r in sorted(best.items())]
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(out, fh, indent=1)
            os.replace(tmp, args.json)

    compile_spent = [0.0]
    cost = {}  # seconds the last measurement of each variant took

    def measure(variant, B, prec):
        data = dev_data[B]
        r = dict(batch=B, precision=prec, variant=variant, device=out["device"])
        elapsed = time.time() - T_START
        est = cost.get(variant, 5.0)
        if variant != "eager-sparse" and elapsed + est > args.budget:
            r["error"] = f"skipped: time budget ({elapsed:.0f} s spent, ~{est:.0f} s needed, budget {args.budget:.0f} s)"
            log(f"{variant:18s} B={B:6d} {prec}: {r['error']}")
            out["results"].append(r)
            write()
            return
        if variant.startswith("compile") and compile_spent[0] > args.compile_budget:
            r["error"] = f"skipped: compile budget spent ({compile_spent[0]:.0f} s)"
            log(f"{variant:18s} B={B:6d} {prec}: {r['error']}")
            out["results"].append(r)
            write()
            return
        t_start = time.time()
        try:
            model.set_sparse(variant.endswith("sparse"))
            if use_cuda:
                torch.cuda.reset_peak_memory_stats()
            if variant.startswith("graph"):
                res = runner.time_graph(data, prec, args.steps, args.warmup)
            else:
                res = runner.time_eager(data, prec, args.steps, args.warmup)
            r.update(res)
            r["samples_per_s"] = B / (r["step_ms"] * 1e-3)
            if not (math.isfinite(r["loss_first"]) and math.isfinite(r["loss_last"])):
                r["error"] = f"loss not finite: {r['loss_first']} -> {r['loss_last']}"
            if use_cuda:
                r["max_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
        except Exception as e:
            msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:400]
            r["error"] = msg
            traceback.print_exc(limit=3)
            if use_cuda:
                try:
                    torch.cuda.synchronize()
                except Exception as e2:
                    log(f"the CUDA context is broken after {variant} ({e2}); stopping")
                    out["results"].append(r)
                    write()
                    raise SystemExit(1)
        r["wall_s"] = time.time() - t_start
        cost[variant] = r["wall_s"]
        if variant.startswith("compile"):
            compile_spent[0] += r["wall_s"]
        if r.get("error"):
            log(f"{variant:18s} B={B:6d} {prec}: FAILED: {r['error']}")
        else:
            ph = "".join(f"{k} {v:.3f}; " for k, v in r["phase_ms"].items() if v > 0)
            log(f"{variant:18s} B={B:6d} {prec}: step {r['step_ms']:.4f} ms, "
                f"{r['samples_per_s'] / 1e6:.3f} M samples/s (loop {r['loop_ms']:.4f} ms; {ph}"
                f"loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}; {r['wall_s']:.1f} s)")
        out["results"].append(r)
        write()

    sizes = [f["B"] for f in files]
    # cheap, safe variants first for every size; then the optional ones
    for v in [v for v in variants if v.startswith("eager")]:
        for prec in precs:
            for B in sizes:
                measure(v, B, prec)
    for v in [v for v in variants if not v.startswith("eager")]:
        if v.startswith("compile"):
            torch._dynamo.reset()
            try:
                torch._dynamo.config.cache_size_limit = 64
            except Exception:
                pass
            mode = "reduce-overhead" if v == "compile-ro-sparse" else "default"
            runner.dense_fn = torch.compile(model.dense_part, mode=mode)
            runner.ro = v == "compile-ro-sparse"
        else:
            runner.dense_fn = model.dense_part
            runner.ro = False
        for prec in precs:
            for B in sizes:
                measure(v, B, prec)
        runner.dense_fn = model.dense_part
        runner.ro = False

    write()
    print("\nbest per batch size and precision:")
    print(f"{'batch':>7} {'prec':5} {'variant':18} {'step ms':>10} {'samples/s':>12}")
    for b in out["best"]:
        print(f"{b['batch']:7d} {b['precision']:5} {b['variant']:18} {b['step_ms']:10.4f} {b['samples_per_s']:12.0f}")
    if args.json:
        log(f"wrote {args.json}")
    else:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
