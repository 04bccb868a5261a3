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
