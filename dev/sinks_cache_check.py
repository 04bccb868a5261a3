"""On CUDA: does sdpa's f32 copy of a bf16 sinks parameter hit (no cast per call), and what does
_sinks_f32 cost for it against f32 sinks (us per call, 5 rounds of 2000, best)."""
import time

import torch

from attnkit import _sdpa

q = torch.randn(1, 32, 1, 128, device="cuda").bfloat16()
param = torch.nn.Parameter(torch.zeros(32, device="cuda").bfloat16())
f32 = torch.zeros(32, device="cuda")
first = _sdpa._sinks_f32(param, q)
print("hit:", _sdpa._sinks_f32(param, q) is first, "version", param._version)


def best_us(fn, n=2000):
    for _ in range(200):
        fn()
    best = 1e9
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


for _ in range(2):
    print(f"f32 {best_us(lambda: _sdpa._sinks_f32(f32, q)):.2f}  bf16 param {best_us(lambda: _sdpa._sinks_f32(param, q)):.2f}"
          f"  cast {best_us(lambda: param.detach().to(torch.float32).contiguous()):.2f}")
