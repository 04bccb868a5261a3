#!/usr/bin/env python3
"""Does each decode kernel keep the residency the planner assumes? From cuobjdump.

An SM's registers are four files of 16K, one per scheduler, and a block's warps are spread over
them, so a file holds 16384 / (32 x registers, allocated in steps of 8) warps. The decode and paged
planners count blocks per SM from decode_geometry.hpp's register_budget, which is also each
kernel's __maxnreg__; a kernel compiled above it (the cap removed or changed) would silently run
fewer blocks per SM than the plan says (docs/perf-notes.md, "Decode round 11": 175 registers put
the bf16 d128 kernel at one block per SM, 10-20% slower). This reads the register counts of
libattnkit.a's split_kv_decode_kernel instances (contiguous, paged, paged boxes, extend) with
`cuobjdump -res-usage` and checks, for blocks of five warps (the GQA groups up to 16), that each
fits as many blocks as the budget does. Needs no GPU.
  python3 dev/decode/register_files.py build/release/libattnkit.a
Exit status: 0 fits, 1 when an instance holds fewer blocks than assumed or none is found, 77
(CTest's skip) when there is no cuobjdump.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hopper"))
from key_loop_spills import find_cuobjdump  # noqa: E402

# decode_geometry.hpp's register_budget: tensor-core engine by head_dim capacity, CUDA-core engine
# by heads per warp.
ASSUMED_MMA = {64: 128, 128: 168, 256: 255}
ASSUMED_SIMT = {4: 128, 8: 255}
WARPS = 5


def blocks_by_registers(warps, registers):
    allocated = (registers + 7) // 8 * 8
    return 4 * (16384 // (32 * allocated)) // warps


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = find_cuobjdump()
    if tool is None:
        print("SKIPPED: no cuobjdump to read " + sys.argv[1] + " (python3 -m pip install nvidia-cuda-cuobjdump)")
        return 77
    run = subprocess.run([tool, "-res-usage", sys.argv[1]], capture_output=True, text=True)
    if run.returncode != 0:
        print("SKIPPED: cuobjdump could not read " + sys.argv[1] + ": " + run.stderr.strip()[:200])
        return 77
    lines = run.stdout.split("\n")
    # Mangled: split_kv_decode_kernelI<T>Li<cap>ENS0_<n>MmaEngine... or SimtEngineI...Li<cap>ELi<hpw>EEE
    # followed by the three flags Lb<paged>ELb<extend>ELb<page boxes>E.
    name_re = re.compile(r"split_kv_decode_kernelI(\w+?)Li(\d+)ENS0_\d+(Mma|Simt)Engine\w*?(?:ELi(\d+))?EEELb(\d)ELb(\d)ELb(\d)E")
    found, bad = 0, 0
    for i, line in enumerate(lines):
        m = re.match(r"\s*Function (\S+):", line)
        if not m or "split_kv_decode_kernel" not in m.group(1):
            continue
        n = name_re.search(m.group(1))
        r = re.search(r"REG:(\d+)", lines[i + 1] if i + 1 < len(lines) else "")
        if not n or not r:
            continue
        dtype, cap, engine, hpw, paged, extend, boxes = n.groups()
        dtype = {"13__nv_bfloat16": "bf16", "6__half": "f16", "f": "f32"}.get(dtype, dtype)
        cap, regs = int(cap), int(r.group(1))
        assumed = ASSUMED_MMA[cap] if engine == "Mma" else ASSUMED_SIMT[int(hpw)]
        have, want = blocks_by_registers(WARPS, regs), blocks_by_registers(WARPS, assumed)
        kind = "extend" if extend == "1" else "paged boxes" if boxes == "1" else "paged" if paged == "1" else "decode"
        what = f"{kind:11} {dtype:4} cap {cap:3} {engine:4}" + (f" hpw {hpw}" if hpw else "      ")
        verdict = "ok" if have >= want else "FEWER BLOCKS THAN THE PLAN ASSUMES"
        print(f"{what}: {regs:3} registers -> {have} blocks of {WARPS} warps per SM (assumed {assumed}: {want}) {verdict}")
        found += 1
        bad += have < want
    if found == 0:
        print("no split_kv_decode_kernel instance found")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
