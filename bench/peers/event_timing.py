"""The benchmark protocol for the PyTorch peers, as bench/cuda/device_support.cuh times ours: a
warm-up of at least `warmup` runs and at least 0.25 s of them, then `reps` runs, each after the L2
is flushed by writing `flush`, timed with CUDA events. Returns (median, min, max) seconds."""
import time

WARMUP_SECONDS = 0.25


def time_events(torch, fn, reps, warmup, flush):
    t0, i = time.perf_counter(), 0
    while True:
        flush.fill_(i & 0xFF)
        fn()
        i += 1
        if i < warmup:
            continue
        torch.cuda.synchronize()
        if time.perf_counter() - t0 >= WARMUP_SECONDS:
            break
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps):
        flush.fill_(i & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def warm_up_device(torch, seconds=1.0):
    """Busy the GPU for `seconds` before a process's first timing: in session 35 the first shapes a
    fresh PyTorch process timed on a just-started H200 read 2-3x slow (cuDNN b1 x 1k 30.8 us against
    11.0 in the next process), which inflated attnkit's ratios; the per-shape warm-up did not cover it.
    A second of sustained work first is the cheap guard (a cold clock or power state is the guess).
    Checked once (session 36, a just-started H100): the first process read cuDNN b1 x 1k at 11.9 us."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            x = torch.matmul(x, x).clamp_(-1, 1)
        torch.cuda.synchronize()
