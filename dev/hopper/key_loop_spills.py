#!/usr/bin/env python3
"""Local-memory traffic inside each Hopper prefill kernel's key loop, from SASS.

Issue 8 asks for no local-memory spills in the main loop. The key loop of every kernel is the
innermost backward branch whose body issues both wgmma products of a key tile (S = Q K^T and
O += P V, two wgmma groups, P V's A in registers); this counts the
LDL / STL instructions inside it, and flags a loop whose wgmma ptxas serialised (a wait after every
GMMA).
Needs no GPU. The input is cuobjdump's SASS text, or a binary (an object, libattnkit.a) that this
script passes to cuobjdump (from PATH, the CUDA toolkit, or PyPI's nvidia-cuda-cuobjdump with
nvidia-cuda-nvdisasm):
  python3 dev/hopper/key_loop_spills.py build/release/libattnkit.a
Exit status: 0 clean, 1 when any key loop touches local memory or has its wgmma serialised, or no
Hopper kernel is found,
77 (CTest's skip) when there is no cuobjdump to read a binary with.
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def find_cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]:
        if root and os.access(os.path.join(root, "bin", "cuobjdump"), os.X_OK):
            return os.path.join(root, "bin", "cuobjdump")
    try:
        import nvidia  # PyPI's nvidia-cuda-cuobjdump installs nvidia/cu*/bin/cuobjdump

        for base in nvidia.__path__:
            hits = sorted(glob.glob(os.path.join(base, "cu*", "bin", "cuobjdump")))
            if hits:
                return hits[-1]
    except ImportError:
        pass
    return None


def sass_lines(path):
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"Function :" in head or b"code for sm_" in head:
        return open(path, errors="replace").read().split("\n")
    tool = find_cuobjdump()
    if tool is None:
        print("SKIPPED: no cuobjdump to read " + path + " (python3 -m pip install nvidia-cuda-cuobjdump)")
        sys.exit(77)
    # cuobjdump runs nvdisasm for SASS: look beside it first (PyPI's nvidia-cuda-nvdisasm installs it there).
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    run = subprocess.run([tool, "--dump-sass", path], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        print("SKIPPED: cuobjdump could not dump " + path + ": " + run.stderr.strip()[:200] +
              " (python3 -m pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
        sys.exit(77)
    return run.stdout.split("\n")


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
        # Both products of a key tile: two wgmma groups (each group's last GMMA carries gsb0), S =
        # Q K^T (A from a descriptor, or from registers where Q is held there) and O += P V (A in
        # registers).
        groups = sum(1 for _, t in body if "GMMA" in t and "gsb0" in t)
        pv_form = any(re.search(r"GMMA\S* R\d+, R\d+, gdesc", t) for _, t in body)
        if groups >= 2 and pv_form and (best is None or addr - start < best[1] - best[0]):
            best = (start, addr, body)
    return best


def main(path):
    bad = 0
    found = kernels(sass_lines(path))
    if not found:
        print("no hopper_prefill_kernel in " + path)
        return 1
    for name, ins in found.items():
        pretty = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip() or name
        loop = key_loop(ins)
        if loop is None:
            print(f"{pretty}: no key loop found")
            bad = 1
            continue
        start, end, body = loop
        spills = sum(1 for _, t in body if re.match(r"(@\S+ )?(LDL|STL)", t))
        # ptxas serialises every wgmma of a kernel it cannot pipeline (C7517 / C7518, e.g. a wgmma
        # or its wait in a branch it thinks divergent): each GMMA then has its own wait.
        gmma = sum(1 for _, t in body if "GMMA" in t)
        waits = sum(1 for _, t in body if "WARPGROUP.DEPBAR" in t)
        serialized = gmma >= 2 and waits >= gmma
        bad |= spills > 0 or serialized
        print(f"{pretty}: key loop {start:#x}-{end:#x}, {len(body)} instructions, LDL/STL {spills}"
              + (f", wgmma SERIALIZED ({waits} waits for {gmma} GMMA)" if serialized else ""))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
