#!/usr/bin/env python3
"""How evenly the Hopper prefill kernel's persistent walk loads its blocks (development tool).

For each causal sweep point it asks the CLI for the plan (`attnkit plan --json`: rows per block,
key tile, tiles per unit, heads per group, grid), rebuilds the kernel's unit order (hopper_prefill.cuh,
unit_tile: groups of heads whose causal pairs are consecutive; an odd tile count's middle tiles
after each group's pairs, or with --middles-last after every group's: hopper_config.hpp's
kMiddleTilesLast, docs/perf-notes.md, "Hopper prefill round 27"), deals the units
to the blocks in boustrophedon rounds as block_tile does, and prints the mean block load over the
largest (1.0: every block finishes together). A work tile costs its key tiles (the block's last
warpgroup's, which sets its pace) plus --boundary key tiles for its start and epilogue.
  python3 dev/hopper/walk_balance.py [--cli build/release/attnkit] [--boundary 2] [--middles-last]
"""
import argparse
import json
import math
import subprocess


def plan(cli, head_dim, seq):
    heads, batch = 2048 // head_dim, 16384 // seq  # the sweep's shapes: hidden 2048, 16k tokens
    out = subprocess.run([cli, "plan", "--op", "prefill", "--batch", str(batch), "--heads", str(heads), "--kv-heads",
                          str(heads), "--head-dim", str(head_dim), "--kv-len", str(seq), "--causal", "--device", "h200",
                          "--json"], capture_output=True, text=True, check=True).stdout
    return batch * heads, json.loads(out)["partition"]


def units(pairs, part, seq, boundary, middles_last):
    rows, bc, group = part["rows_per_block"], part["tile_size"], part["heads_per_tile_group"]
    m = math.ceil(seq / rows)
    keys = [math.ceil(min((i + 1) * rows, seq) / bc) for i in range(m)]  # key tiles of query tile i
    if part["tiles_per_unit"] != 2:  # single tiles, longest first within a group
        out = []
        for g0 in range(0, pairs, group):
            out += [keys[m - 1 - i] + boundary for i in range(m) for _ in range(min(group, pairs - g0))]
        return out
    paired, middles = [], []
    for g0 in range(0, pairs, group):
        heads = min(group, pairs - g0)
        paired += [keys[m - 1 - i] + keys[i] + 2 * boundary for _ in range(heads) for i in range(m // 2)]
        mids = [keys[m // 2] + boundary] * heads if m % 2 else []
        if middles_last:
            middles += mids
        else:
            paired += mids
    return paired + middles


def balance(work, grid):
    load = [0.0] * grid
    for u, w in enumerate(work):
        r, slot = divmod(u, grid)
        load[slot if r % 2 == 0 else grid - 1 - slot] += w
    return sum(work) / grid / max(load)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/release/attnkit")
    ap.add_argument("--boundary", type=float, default=2.0)
    ap.add_argument("--middles-last", action="store_true")
    a = ap.parse_args()
    for head_dim in (64, 128, 256):
        for seq in (512, 1024, 2048, 4096, 8192, 16384):
            pairs, part = plan(a.cli, head_dim, seq)
            work = units(pairs, part, seq, a.boundary, a.middles_last)
            print(f"d{head_dim} causal {seq}: {part['rows_per_block']}-row blocks, {part['tile_size']}-key tiles, "
                  f"{len(work)} units on {part['grid_blocks']} blocks: balance {balance(work, part['grid_blocks']):.3f}")


if __name__ == "__main__":
    main()
