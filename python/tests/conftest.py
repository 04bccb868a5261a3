"""Shared test support: fresh random seeds (replay with ATTNKIT_TEST_SEED), the numpy float64
attention the tests compare against beside attnkit's own golden, and DESIGN.md's tolerances."""
from __future__ import annotations

import os
import secrets

import numpy as np
import pytest

# DESIGN.md: f32 max-abs <= 1e-3 and rel-L2 <= 1e-5; f16 rel-L2 <= 2e-3; bf16 rel-L2 <= 1e-2.
REL_L2 = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}
MAX_ABS_F32 = 1e-3


@pytest.fixture
def seed(request) -> int:
    value = int(os.environ.get("ATTNKIT_TEST_SEED", secrets.randbits(32)))
    request.node.user_properties.append(("seed", value))
    print(f"ATTNKIT_TEST_SEED={value}")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def check_close(actual, golden, dtype: str, what: str = "out") -> None:
    """actual (any float array) against a float64 golden: no NaN where the golden has none,
    rel-L2 within the dtype's tolerance, and max-abs within 1e-3 for f32."""
    a = np.asarray(actual, dtype=np.float64)
    g = np.asarray(golden, dtype=np.float64)
    assert a.shape == g.shape, f"{what}: shape {a.shape} != golden {g.shape}"
    finite = np.isfinite(g)
    assert not np.isnan(a[finite]).any(), f"{what}: {int(np.isnan(a[finite]).sum())} NaN elements (unwritten or broken)"
    assert np.array_equal(a[~finite], g[~finite]), f"{what}: non-finite golden values (-inf LSE) not reproduced"
    diff = a[finite] - g[finite]
    norm = np.linalg.norm(g[finite])
    rel_l2 = np.linalg.norm(diff) / (norm if norm > 0 else 1.0)
    max_abs = np.abs(diff).max(initial=0.0)
    assert rel_l2 <= REL_L2[dtype], f"{what}: rel-L2 {rel_l2:.3g} > {REL_L2[dtype]:g} ({dtype}), max-abs {max_abs:.3g}"
    if dtype == "f32":
        assert max_abs <= MAX_ABS_F32, f"{what}: max-abs {max_abs:.3g} > {MAX_ABS_F32:g} (f32)"


def attention_f64(q, k, v, *, causal: bool, window: int = 0, scale: float = 0.0, softcap: float = 0.0,
                  kv_valid=None, query_positions=None, sinks=None, key_starts=None):
    """Plain float64 softmax attention in numpy. q [b, h, qn, d]; k, v [b, kvh, kn, d].
    Query row r sits at absolute position r + (n - qn) (bottom-right), n being the sequence's
    valid keys (kv_valid[b], default kn); key j is visible iff (not causal or j <= pos) and
    (window == 0 or j > pos - window) and j >= key_starts[b] (left padding; default 0). sinks [h]:
    one more logit per head in each row's softmax,
    with no value (gpt-oss). Returns (out [b, h, qn, d], lse [b, h, qn]); a row with no visible
    key gives zeros and -inf (the sink's logit with sinks)."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    b, h, qn, d = q.shape
    kvh, kn = k.shape[1], k.shape[2]
    group = h // kvh
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * (scale if scale > 0 else 1.0 / np.sqrt(d))
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    out = np.zeros((b, h, qn, d))
    lse = np.full((b, h, qn), -np.inf)
    for bi in range(b):
        n = kn if kv_valid is None else int(kv_valid[bi])
        pos = np.arange(qn) + (n - qn)
        j = np.arange(kn)[None, :]
        visible = j < n
        if causal:
            visible = visible & (j <= pos[:, None])
        if window > 0:
            visible = visible & (j > pos[:, None] - window)
        if key_starts is not None:
            visible = visible & (j >= int(key_starts[bi]))
        for hi in range(h):
            scores = np.where(visible, s[bi, hi], -np.inf)
            sink = -np.inf if sinks is None else float(sinks[hi])
            m = np.maximum(scores.max(axis=-1, keepdims=True), sink)
            rows = np.isfinite(m[:, 0])
            shift = np.where(np.isfinite(m), m, 0.0)
            p = np.where(visible, np.exp(scores - shift), 0.0)
            total = p.sum(axis=-1, keepdims=True) + np.exp(sink - shift)
            out[bi, hi, rows] = (p[rows] / total[rows]) @ v[bi, hi]
            lse[bi, hi, rows] = (m[rows, 0] + np.log(total[rows, 0]))
    return out, lse
