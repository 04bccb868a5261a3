#!/usr/bin/env python3
"""PyTorch SDPA peers for the CUDA prefill sweep (BASELINES.md), under DESIGN.md's protocol.

  torch_prefill.py measure [--quick] [--head-dim D] [--max-seq S] [--min-seq S] > torch.jsonl
      flash and cuDNN backends + torch bf16 GEMM (the filters match prefill_bench's)
  torch_prefill.py render attnkit.jsonl torch.jsonl --out bench/results/prefill_h200
      merges attnkit's rows (bench/cuda/prefill_bench.cu's JSON lines) with the peers' (medians where
      a call ran several rounds) into
      <out>.md (table) and <out>.png (chart), and prints the table.

Timing: CUDA events around each call, warm-up first, a 256 MiB write before every repetition so no
run reads warm L2, median of the repetitions. FLOPs: 4 * batch * heads * visible pairs * head_dim.
"""
import json
import statistics
import sys

from event_timing import time_events  # the shared protocol (same folder)


def sweep():
    for d in (64, 128, 256):
        for causal in (False, True):
            s = 512
            while s <= 16384:
                yield dict(head_dim=d, causal=causal, seq_len=s, batch=16384 // s, heads=2048 // d)
                s *= 2


def flops(p):
    s = p["seq_len"]
    pairs = s * (s + 1) // 2 if p["causal"] else s * s
    return 4.0 * p["batch"] * p["heads"] * pairs * p["head_dim"]


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def measure(quick):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    reps = 10 if quick else 50
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def time_it(fn):
        return time_events(torch, fn, reps, 5, flush)

    n = 8192
    x = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    med, lo, hi = time_it(lambda: x @ y)
    print(json.dumps(dict(impl="torch-bf16-gemm", tflops=2.0 * n**3 / med / 1e12, median_s=med)), flush=True)
    del x, y

    backends = [("torch-flash", SDPBackend.FLASH_ATTENTION), ("torch-cudnn", SDPBackend.CUDNN_ATTENTION)]
    for p in sweep():
        if arg("--head-dim", p["head_dim"]) != p["head_dim"] or not arg("--min-seq", 0) <= p["seq_len"] <= arg("--max-seq", 1 << 30):
            continue
        shape = (p["batch"], p["heads"], p["seq_len"], p["head_dim"])
        q = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        v = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        for name, backend in backends:
            row = dict(impl=name, **p)
            try:
                with sdpa_kernel([backend]):
                    med, lo, hi = time_it(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"]))
                row.update(median_s=med, min_s=lo, max_s=hi, reps=reps, flops=flops(p), tflops=flops(p) / med / 1e12)
            except Exception as e:  # a backend that refuses a shape is reported, not hidden
                row.update(error=str(e).splitlines()[0][:200])
            print(json.dumps(row), flush=True)
        del q, k, v


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def render(attnkit_path, torch_path, out):
    rows = load(attnkit_path) + load(torch_path)
    # Rows without a dtype are bf16 (the peers always are): e4m3 rows get their own lines, with no
    # peer columns, since SDPA has no fp8 attention to compare against.
    key = lambda r: (r.get("dtype", "bf16"), r.get("head_dim"), r.get("causal"), r.get("seq_len"))
    # A call may run the sweep in several rounds, attnkit's bench and the peers alternating
    # (scripts/device-hopper.sh --rounds N): each cell is the median of its rounds.
    samples = {}
    for r in rows:
        if "seq_len" in r and "tflops" in r and r["impl"] in ("attnkit", "attnkit-tiled", "torch-flash", "torch-cudnn"):
            samples.setdefault(key(r), {}).setdefault(r["impl"], []).append(r["tflops"])
    by = {k: {impl: statistics.median(v) for impl, v in impls.items()} for k, impls in samples.items()}
    rounds = max((len(v) for impls in samples.values() for v in impls.values()), default=0)
    ceiling_of = lambda impl: [statistics.median(x)] if (x := [r["tflops"] for r in rows if r["impl"] == impl]) else []
    gemm, gemm_e4m3, tgemm = ceiling_of("cublas-bf16-gemm"), ceiling_of("cublaslt-e4m3-gemm"), ceiling_of("torch-bf16-gemm")
    families = {key(r): r.get("family", "") for r in rows if r.get("impl") == "attnkit" and "seq_len" in r}
    lines = [
        "| dtype | head_dim | causal | seq_len | batch x heads | attnkit TFLOP/s | % of GEMM | family | tiled (fallback) "
        "| torch flash (FA2) | torch cuDNN | attnkit / flash | attnkit / cuDNN |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in sorted(by):
        dtype, d, causal, s = k
        v = by[k]
        a, fl, cu, ti = v.get("attnkit"), v.get("torch-flash"), v.get("torch-cudnn"), v.get("attnkit-tiled")
        fmt = lambda x: f"{x:.0f}" if x else "-"
        ratio = lambda x, y: f"{x / y:.2f}x" if x and y else "-"
        ceiling = gemm_e4m3 if dtype == "e4m3" else gemm  # each dtype against its own GEMM
        pct = f"{100 * a / ceiling[0]:.0f}%" if a and ceiling else "-"
        lines.append(f"| {dtype} | {d} | {'yes' if causal else 'no'} | {s} | {16384 // s} x {2048 // d} | {fmt(a)} | {pct} | "
                     f"{families.get(k, '')} | {fmt(ti)} | {fmt(fl)} | {fmt(cu)} | {ratio(a, fl)} | {ratio(a, cu)} |")
    head = []
    if rounds > 1:
        head.append(f"each TFLOP/s figure: the median of {rounds} rounds in this call (attnkit's bench and the peers alternating)")
    if gemm:
        head.append(f"bf16 GEMM ceiling (cuBLAS 8192^3, same run): {gemm[0]:.0f} TFLOP/s")
    if gemm_e4m3:
        head.append(f"e4m3 GEMM ceiling (cuBLASLt 8192^3, bf16 out, same run): {gemm_e4m3[0]:.0f} TFLOP/s "
                    "(the e4m3 rows' % of GEMM)")
    if tgemm:
        head.append(f"bf16 GEMM via torch.matmul (same run): {tgemm[0]:.0f} TFLOP/s")
    table = "\n".join(head + [""] + lines) + "\n"
    with open(out + ".md", "w") as f:
        f.write(table)
    with open(out + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    print(table)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharey=True)
        for col, d in enumerate((64, 128, 256)):
            for row, causal in enumerate((False, True)):
                ax = axes[row][col]
                seqs = sorted(s for (dt, dd, c, s) in by if dt == "bf16" and dd == d and c == causal)
                if not seqs:  # a filtered sweep: nothing measured for this panel
                    ax.set_visible(False)
                    continue
                for impl, style in (("attnkit", "o-"), ("attnkit-tiled", "x-."), ("torch-flash", "s--"), ("torch-cudnn", "^:")):
                    ys = [by[("bf16", d, causal, s)].get(impl, float("nan")) for s in seqs]
                    ax.plot(seqs, ys, style, label=impl)
                fp8 = sorted(s for (dt, dd, c, s) in by if dt == "e4m3" and dd == d and c == causal)
                if fp8:
                    ax.plot(fp8, [by[("e4m3", d, causal, s)].get("attnkit", float("nan")) for s in fp8], "D-",
                            label="attnkit e4m3")
                if gemm:
                    ax.axhline(gemm[0], color="gray", lw=0.8, label="cuBLAS bf16 GEMM")
                ax.set_xscale("log", base=2)
                ax.set_title(f"head_dim {d}, {'causal' if causal else 'non-causal'}")
                ax.set_xlabel("seq_len (16k tokens per batch)")
                if col == 0:
                    ax.set_ylabel("TFLOP/s")
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out + ".png", dpi=90)
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "measure":
        measure("--quick" in sys.argv)
    elif len(sys.argv) >= 4 and sys.argv[1] == "render":
        out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "prefill"
        render(sys.argv[2], sys.argv[3], out)
    else:
        print(__doc__)
        sys.exit(2)
