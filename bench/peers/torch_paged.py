#!/usr/bin/env python3
"""PyTorch SDPA peers for the paged decode benchmark, and the merged result (JSON + markdown).

Reads attnkit_paged_bench's JSON (bench/cuda/paged_bench.cu). For its mixed batch (64 sequences of
different lengths) it times PyTorch SDPA with the flash and cuDNN backends (enable_gqa=True) on the
equivalent padded problem: q [64, 32, 1, 128] against K/V [64, 8, L_max, 128], every sequence padded
to the longest (no mask: flash takes none, and the padded keys cost the same with or without one),
under attnkit's protocol (warm-up, 256 MiB L2 flush before each repetition, CUDA events around
the call alone, median). Then writes the merged JSON and a markdown table.

  python3 bench/peers/torch_paged.py --attnkit paged_attnkit.json --commit <sha> \
      --json bench/results/paged_h200.json --md bench/results/paged_h200.md [--reps 50]
"""
import argparse
import json
import sys

from event_timing import time_events  # the shared protocol (same folder)

FLUSH_BYTES = 256 << 20


def padded_peers(row, reps, warmup):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    B, H, G, D = row["batch"], row["num_heads"], row["kv_heads"], row["head_dim"]
    L = max(row["lengths"])
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[row["dtype"]]
    q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
    k = torch.randn(B, G, L, D, device=dev, dtype=dt)
    v = torch.randn(B, G, L, D, device=dev, dtype=dt)
    peers = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                fn()
                med, lo, hi = time_events(torch, fn, reps, warmup, flush)
            peers["torch-" + name] = {"median_s": med, "min_s": lo, "max_s": hi, "repetitions": reps,
                                      "padded_len": L}
        except Exception as e:  # a backend that does not take this shape on this build
            peers["torch-" + name] = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    return peers, info


def ms(x):
    return f"{x * 1e3:.3f}"


def variant(r, key):
    if key not in r or "contiguous" not in r:
        return "-"
    return f"{r['contiguous']['median_s'] / r[key]['median_s']:.3f}"


def render(doc):
    lines = [f"# Paged decode on {doc['device']} (commit {doc.get('commit', '?')})", "",
             f"Command: `{doc['command']}`; peers: `{doc.get('peer_command', '-')}`", "",
             f"Protocol: {doc['protocol']}. Read ceiling measured in the same run: "
             f"{doc['read_ceiling_bytes_per_s'] / 1e12:.2f} TB/s.", "",
             "## Paged (page 16, HND, permuted pages) vs our contiguous decode, same run", "",
             "32 query / 8 KV heads, head_dim 128; every sequence at kv_len. ratio = contiguous time / paged time "
             "(paged throughput as a fraction of contiguous; target >= 0.95).", "",
             "Each call runs its own plan (paged splits keys further for batches of several sequences: mixed lengths "
             "balance; docs/paged.md). Variants in the same run: `same partition` runs the paged kernel on the "
             "contiguous plan's partition (the addressing cost alone); `in-order` uses a table whose pages are "
             "consecutive per sequence (what scattered pages cost beyond that); `copy ring` runs the same plan "
             "with every thread copying rows instead of the producer's page boxes (the plan's page_boxes: "
             "docs/paged.md).", "",
             "| dtype | batch | kv_len | paged ms | contiguous ms | ratio | ratio same partition | ratio in-order | "
             "ratio copy ring | paged TB/s | % of read ceiling | splits paged / contiguous |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        if r["case"] != "sweep":
            continue
        if "skipped" in r:
            lines.append(f"| {r['dtype']} | {r['batch']} | {r['kv_len']} | - | - | - | - | - | - | skipped: {r['skipped']} |")
            continue
        p, c = r["paged"], r.get("contiguous")
        lines.append(f"| {r['dtype']} | {r['batch']} | {r['kv_len']} | {ms(p['median_s'])} | "
                     f"{ms(c['median_s']) if c else '-'} | {r.get('paged_vs_contiguous', float('nan')):.3f} | "
                     f"{variant(r, 'paged_contiguous_partition')} | {variant(r, 'paged_sequential_pages')} | "
                     f"{variant(r, 'paged_copy_ring')} | {p['achieved_bytes_per_s'] / 1e12:.2f} | {p['pct_of_read_ceiling']:.1f} | "
                     f"{r['plan']['splits']} / {r.get('contiguous_splits', '-')} |")
    for r in doc["rows"]:
        if r["case"] != "mixed":
            continue
        lens = r["lengths"]
        lines += ["", "## Mixed batch: 64 sequences, lengths uniform in [100, 32768] (bf16)", "",
                  f"Lengths: min {min(lens)}, mean {sum(lens) / len(lens):.0f}, max {max(lens)}. attnkit reads each "
                  "sequence's own keys through its pages; the PyTorch peers run the equivalent padded problem "
                  f"(every sequence padded to {max(lens)} keys, enable_gqa). speedup = peer time / attnkit paged time "
                  "(target >= 1.5).", "",
                  "| impl | ms | speedup of attnkit paged |", "|---|---:|---:|"]
        p = r["paged"]["median_s"]
        lines.append(f"| attnkit paged (ragged) | {ms(p)} | 1.00 |")
        extra = [(k, "attnkit paged, " + k[len("paged_"):].replace("_", " ")) for k in r if k.startswith("paged_splits_")]
        for key, label in [("paged_repeat", "attnkit paged (ragged), measured again last"),
                           ("paged_copy_ring", "attnkit paged, copy ring instead of page boxes"),
                           ("paged_contiguous_partition", "attnkit paged, contiguous plan's partition"),
                           ("paged_sequential_pages", "attnkit paged, in-order pages")] + extra:
            if key in r:
                lines.append(f"| {label} | {ms(r[key]['median_s'])} | {r[key]['median_s'] / p:.2f} |")
        if "contiguous" in r:
            lines.append(f"| attnkit contiguous (same lengths, padded cache) | {ms(r['contiguous']['median_s'])} | "
                         f"{r['contiguous']['median_s'] / p:.2f} |")
        for name, peer in r.get("peers", {}).items():
            if "skipped" in peer:
                lines.append(f"| {name} (padded) | - | skipped: {peer['skipped']} |")
            else:
                lines.append(f"| {name} (padded) | {ms(peer['median_s'])} | {peer['median_s'] / p:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnkit", required=True)
    ap.add_argument("--commit", default="?")
    ap.add_argument("--json", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-peers", action="store_true", help="render only (no torch)")
    args = ap.parse_args()
    with open(args.attnkit) as f:
        doc = json.load(f)
    doc["commit"] = args.commit
    doc["peer_command"] = "python3 " + " ".join(sys.argv)
    if not args.no_peers:
        for r in doc["rows"]:
            if r["case"] == "mixed" and "skipped" not in r:
                print("torch padded peers for the mixed batch", file=sys.stderr, flush=True)
                r["peers"], info = padded_peers(r, args.reps, args.warmup)
                doc["peer_versions"] = info
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    with open(args.md, "w") as f:
        f.write(render(doc))
    sys.stdout.write(render(doc))


if __name__ == "__main__":
    main()
