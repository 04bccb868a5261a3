#!/usr/bin/env python3
"""Merge attnkit's CUDA decode benchmark JSON (`attnkit bench --json`) with the PyTorch peers'
(bench/peers/torch_decode.py) and optional ncu DRAM counts into one JSON, a markdown table and a
PNG chart (ratio of each attnkit point to the best peer there).

  python3 bench/render.py --ours attnkit.json --peers peers.json [--ncu ncu.json] --out bench/results/decode_h200

Writes <out>.json, <out>.md and <out>.png. The ncu file is {"<dtype>_b<batch>_kv<len>": dram bytes}.
"""
import argparse
import json
import os


def key(row):
    return (row["dtype"], int(row["batch"]), int(row["kv_len"]))


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--peers", required=True)
    ap.add_argument("--ncu", default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    ours_doc = json.load(open(args.ours))
    peers_doc = json.load(open(args.peers))
    ncu = json.load(open(args.ncu)) if args.ncu and os.path.exists(args.ncu) else {}

    ceiling = None
    plain, graph, skipped = {}, {}, {}
    for r in ours_doc["rows"]:
        if r.get("impl") == "read-ceiling":
            ceiling = r["ceiling_value"]
            continue
        if r.get("op") != "decode" or r.get("impl") != "attnkit":
            continue
        if r.get("skipped"):
            skipped[key(r)] = r["skipped"]
        elif r.get("timing") == "graph":
            graph[key(r)] = r
        else:
            plain[key(r)] = r
    peers = {}
    for r in peers_doc["rows"]:
        if r.get("skipped") or "median_s" not in r:
            continue
        peers.setdefault(key(r), {})[r["impl"]] = r["median_s"]

    points = sorted(set(plain) | set(skipped), key=lambda k: (k[0] != "bf16", k[0], k[1], k[2]))
    merged = []
    lines = [
        f"# Decode on {ours_doc.get('device', peers_doc.get('device', '?'))}",
        "",
        f"- attnkit commit: `{ours_doc.get('commit', '?')}`; command: `{ours_doc.get('command', '?')}`",
        f"- peers: torch {peers_doc.get('torch')} cuDNN {peers_doc.get('cudnn')}; command: `{peers_doc.get('command')}`",
        f"- read ceiling measured in the same run (16-byte loads, 4 GiB): "
        f"{(ceiling or 0) / 1e12:.3f} TB/s",
        "- times are medians of CUDA-event timings with the L2 flushed before each repetition; "
        "TB/s = the plan's predicted bytes / measured time; predicted = bytes / read ceiling; "
        "ratio = peer time / attnkit time (> 1: attnkit faster).",
        "",
        "| KV dtype | batch | kv_len | plan bytes (MB) | predicted ms | attnkit ms | graph ms | TB/s | % ceiling "
        "| torch flash ms | torch cuDNN ms | torch math ms | vs cuDNN | vs best peer | ncu DRAM / plan |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in points:
        dt, b, L = k
        if k in skipped:
            lines.append(f"| {dt} | {b} | {L} | skipped: {skipped[k]} |" + " |" * 11)
            merged.append({"dtype": dt, "batch": b, "kv_len": L, "skipped": skipped[k]})
            continue
        r = plain[k]
        g = graph.get(k)
        p = peers.get(k, {})
        best_peer = min(p.values()) if p else None
        cud = p.get("torch-cudnn")
        t = r["median_s"]
        ncu_bytes = ncu.get(f"{dt}_b{b}_kv{L}")
        ncu_ratio = f"{ncu_bytes / r['bytes']:.3f}" if ncu_bytes else "-"
        lines.append(
            f"| {dt} | {b} | {L} | {r['bytes'] / 1e6:.1f} | {fmt_ms(r['predicted_s'])} | {fmt_ms(t)} | "
            f"{fmt_ms(g['median_s']) if g else '-'} | {r['achieved_bytes_per_s'] / 1e12:.3f} | "
            f"{r['pct_of_ceiling']:.1f} | {fmt_ms(p.get('torch-flash'))} | {fmt_ms(cud)} | {fmt_ms(p.get('torch-math'))} | "
            f"{f'{cud / t:.2f}' if cud else '-'} | {f'{best_peer / t:.2f}' if best_peer else '-'} | {ncu_ratio} |")
        merged.append({
            "dtype": dt, "batch": b, "kv_len": L, "plan_bytes": r["bytes"], "predicted_s": r["predicted_s"],
            "attnkit_s": t, "attnkit_graph_s": g["median_s"] if g else None,
            "attnkit_bytes_per_s": r["achieved_bytes_per_s"], "pct_of_read_ceiling": r["pct_of_ceiling"],
            "peers_s": p, "ratio_vs_cudnn": (cud / t) if cud else None,
            "ratio_vs_best_peer": (best_peer / t) if best_peer else None, "ncu_dram_bytes": ncu_bytes,
            "plan": r.get("plan")})
    doc = {"device": ours_doc.get("device"), "commit": ours_doc.get("commit"), "command": ours_doc.get("command"),
           "peers_command": peers_doc.get("command"), "torch": peers_doc.get("torch"), "cudnn": peers_doc.get("cudnn"),
           "read_ceiling_bytes_per_s": ceiling, "points": merged}
    with open(args.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("render: matplotlib missing, no chart")
        return
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
    for ax, dt in zip(axes, ("bf16", "f32")):
        pts = [m for m in merged if m["dtype"] == dt and m.get("ratio_vs_best_peer")]
        labels = [f"b{m['batch']}\n{m['kv_len'] // 1024}k" for m in pts]
        ratios = [m["ratio_vs_best_peer"] for m in pts]
        pct = [m["pct_of_read_ceiling"] for m in pts]
        bars = ax.bar(range(len(pts)), ratios, color=["tab:green" if x >= 1 else "tab:red" for x in ratios])
        for bar, p in zip(bars, pct):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{p:.0f}%", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(pts)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_title(f"{dt} KV: attnkit speed-up over the best PyTorch SDPA backend\n(label: % of measured read ceiling)",
                     fontsize=9)
        ax.set_ylabel("best peer time / attnkit time")
    fig.suptitle(f"Decode, 32 q / 8 KV heads, head_dim 128, {doc['device']}, commit {str(doc['commit'])[:10]}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)
    print(f"render: wrote {args.out}.json, .md, .png")


if __name__ == "__main__":
    main()
