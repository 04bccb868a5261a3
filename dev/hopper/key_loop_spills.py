#!/usr/bin/env python3
"""Local-memory traffic inside each Hopper prefill kernel's key loop, from SASS.

Issue 8 asks for no local-memory spills in the main loop. The key loop of every kernel is the
innermost backward branch whose body issues both wgmma groups of a key tile (S = Q K^T and
O += P V, each ending in a `gsb0` GMMA); this counts the LDL / STL instructions inside it.
Needs no GPU:
  nvcc -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -std=c++20 \
       -Iinclude -Isrc -c src/cuda/prefill_hopper/hopper_prefill.cu -o /tmp/hp.o
  cuobjdump --dump-sass /tmp/hp.o > /tmp/hp.sass   # cuobjdump: PyPI's nvidia-cuda-cuobjdump
  python3 dev/hopper/key_loop_spills.py /tmp/hp.sass
Exit status 1 when any key loop touches local memory.
"""
import re
import subprocess
import sys


def kernels(lines):
    funcs, cur = {}, None
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return {f: ins for f, ins in funcs.items() if "hopper_prefill_kernel" in f}


def key_loop(ins):
    best = None
    for addr, text in ins:
        m = re.search(r"BRA (?:\S+, )?0x([0-9a-f]+)$", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        start = int(m.group(1), 16)
        body = [x for x in ins if start <= x[0] <= addr]
        groups = sum(1 for _, t in body if "GMMA" in t and "gsb0" in t)
        if groups >= 2 and (best is None or addr - start < best[1] - best[0]):
            best = (start, addr, body)
    return best


def main(path):
    bad = 0
    for name, ins in kernels(open(path).read().split("\n")).items():
        pretty = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip() or name
        loop = key_loop(ins)
        if loop is None:
            print(f"{pretty}: no key loop found")
            bad = 1
            continue
        start, end, body = loop
        spills = sum(1 for _, t in body if re.match(r"(@\S+ )?(LDL|STL)", t))
        bad |= spills > 0
        print(f"{pretty}: key loop {start:#x}-{end:#x}, {len(body)} instructions, LDL/STL {spills}")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
