"""bench/peers/torch_prefill.py render: a call's rounds reduce to per-point medians (no GPU, no torch)."""
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers"))
import torch_prefill  # noqa: E402


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_rounds_become_medians(tmp_path):
    point = dict(dtype="bf16", head_dim=128, causal=False, seq_len=2048)
    ours = [dict(impl="attnkit", family="warp_specialized_wgmma", tflops=t, **point) for t in (500.0, 550.0, 560.0)]
    ours += [dict(impl="cublas-bf16-gemm", tflops=t) for t in (700.0, 720.0, 710.0)]
    peers = [dict(impl="torch-cudnn", tflops=t, **point) for t in (540.0, 600.0, 520.0)]
    write_rows(tmp_path / "a.jsonl", ours)
    write_rows(tmp_path / "t.jsonl", peers)
    torch_prefill.render(str(tmp_path / "a.jsonl"), str(tmp_path / "t.jsonl"), str(tmp_path / "out"))
    table = (tmp_path / "out.md").read_text()
    assert "median of 3 rounds" in table
    assert "ceiling (cuBLAS 8192^3, same run): 710 TFLOP/s" in table
    row = next(line for line in table.splitlines() if line.startswith("| bf16 | 128 | no | 2048 |"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[6] == "550"  # attnkit: median of 500, 550, 560
    assert cells[7] == "77%"  # 550 / 710
    assert cells[11] == "540"  # cuDNN: median of 540, 600, 520
    assert cells[13] == "1.02x"


def test_one_round_has_no_rounds_line(tmp_path):
    point = dict(head_dim=64, causal=True, seq_len=512)
    write_rows(tmp_path / "a.jsonl", [dict(impl="attnkit", tflops=300.0, **point)])
    write_rows(tmp_path / "t.jsonl", [dict(impl="torch-flash", tflops=200.0, **point)])
    torch_prefill.render(str(tmp_path / "a.jsonl"), str(tmp_path / "t.jsonl"), str(tmp_path / "out"))
    table = (tmp_path / "out.md").read_text()
    assert "rounds" not in table
    assert "| 300 |" in table and "| 1.50x |" in table
