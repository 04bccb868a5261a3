"""Whether a call is being traced by torch.compile, without importing torch for numpy users: then
attnkit's functions hand torch tensors to their custom operators (torch_ops.py) instead of
running the native call, which the tracer cannot see into."""
from __future__ import annotations

import sys
from typing import Any


def tracing(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and torch.compiler.is_compiling()


def ops():
    """The registered operators (torch.ops.attnkit), registering them on first use."""
    from . import torch_ops  # noqa: F401  (registration is the import's side effect)
    import torch

    return torch.ops.attnkit
