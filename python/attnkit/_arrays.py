"""Array-library plumbing: which library an array comes from (numpy, torch, cupy), where it
lives, its attnkit dtype name, allocation with the same library on the same device, and the
stream a CUDA run goes on. Nothing here copies an array."""
from __future__ import annotations

import sys
from typing import Any, Sequence

_NUMPY_NAMES = {"float32": "f32", "float16": "f16", "int32": "i32", "bfloat16": "bf16", "float8_e4m3fn": "e4m3"}
_TORCH_NAMES = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.int32": "i32",
                "torch.float8_e4m3fn": "e4m3"}
_CANONICAL = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16", "fp16": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
    "e4m3": "e4m3", "float8_e4m3fn": "e4m3", "fp8_e4m3": "e4m3",
}


def library(x: Any) -> str:
    """'numpy', 'torch' or 'cupy' for an array of that library; raises TypeError otherwise."""
    root = type(x).__module__.split(".", 1)[0]
    if root in ("numpy", "torch", "cupy"):
        return root
    if hasattr(x, "__dlpack__"):
        return "dlpack"
    raise TypeError(f"attnkit: expected a numpy, torch or cupy array, got {type(x).__name__}")


def dtype_name(dtype: Any) -> str:
    """attnkit's name ('f32', 'f16', 'bf16', 'i32', 'e4m3') for a dtype given as a string, a numpy
    dtype or a torch dtype (torch.float8_e4m3fn is 'e4m3')."""
    if isinstance(dtype, str):
        key = dtype.lower()
        if key in _CANONICAL:
            return _CANONICAL[key]
    text = str(dtype)
    if text in _TORCH_NAMES:
        return _TORCH_NAMES[text]
    name = getattr(dtype, "name", None) or getattr(getattr(dtype, "dtype", None), "name", None)
    if name in _NUMPY_NAMES:
        return _NUMPY_NAMES[name]
    from ._attnkit import Error

    raise Error(f"dtype: {dtype!r} is not supported. Fix: use float32, float16 or bfloat16 (int32 for indices; "
                "float8_e4m3fn for e4m3 prefill inputs)")


def array_dtype(x: Any) -> str:
    return dtype_name(x.dtype)


def device_of(x: Any) -> tuple[str, int]:
    """('cpu', 0) or ('cuda', index)."""
    lib = library(x)
    if lib == "numpy":
        return ("cpu", 0)
    if lib == "torch":
        return ("cuda", x.device.index or 0) if x.device.type == "cuda" else ("cpu", 0)
    if lib == "cupy":
        return ("cuda", x.device.id)
    kind, index = x.__dlpack_device__()
    return ("cuda", int(index)) if int(kind) == 2 else ("cpu", 0)


def exported(x: Any) -> Any:
    """The array as the native module takes it. A torch tensor that requires grad cannot be
    exported through DLPack; detach() gives the same memory without the autograd record. A
    torch.float8_e4m3fn tensor goes as a uint8 view of the same memory (not every torch exports
    float8 through DLPack); the native side reads those bytes as e4m3 for the q/k/v of an e4m3
    prefill plan only, and rejects them everywhere else."""
    if x is None or library(x) != "torch":
        return x
    if x.requires_grad:
        x = x.detach()
    if str(x.dtype) == "torch.float8_e4m3fn":
        import torch

        x = x.view(torch.uint8)
    return x


def _torch_dtype(name: str):
    import torch

    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
            "u8": torch.uint8}[name]


def _numpy_dtype(lib_module, name: str):
    if name == "bf16":
        from ._attnkit import Error

        raise Error(f"{lib_module.__name__}: has no bfloat16 dtype. Fix: use torch tensors for bf16, or f32/f16 arrays")
    return {"f32": lib_module.float32, "f16": lib_module.float16, "i32": lib_module.int32, "u8": lib_module.uint8}[name]


def empty(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialised array of `shape` and attnkit `dtype` from `like`'s library, on its device."""
    lib = library(like)
    shape = tuple(int(s) for s in shape)
    if lib == "torch":
        import torch

        return torch.empty(shape, dtype=_torch_dtype(dtype), device=like.device)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=_numpy_dtype(cupy, dtype))
    import numpy

    if device_of(like)[0] != "cpu":
        from ._attnkit import Error

        raise Error("attnkit: cannot allocate an output beside a CUDA array of an unknown library. "
                    "Fix: pass out= (and lse=) yourself, or use torch or cupy arrays")
    return numpy.empty(shape, dtype=_numpy_dtype(numpy, dtype))


def index_array(values: Any, like: Any) -> Any:
    """An int32 array on `like`'s device from an array (returned as is), an int or a sequence."""
    if not isinstance(values, (int, list, tuple)):
        return values
    items = [values] if isinstance(values, int) else list(values)
    lib = library(like)
    if lib == "torch":
        import torch

        return torch.tensor(items, dtype=torch.int32, device=like.device)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.asarray(items, dtype=cupy.int32)
    import numpy

    return numpy.asarray(items, dtype=numpy.int32)


def current_stream(x: Any) -> int:
    """The CUDA stream a run on `x` goes on, as an integer handle (0 for the CPU or the default
    stream): torch's current stream for torch tensors, cupy's for cupy arrays."""
    kind, index = device_of(x)
    if kind != "cuda":
        return 0
    lib = library(x)
    if lib == "torch":
        import torch

        return int(torch.cuda.current_stream(index).cuda_stream)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(index):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def torch_current_device() -> int:
    """torch's current CUDA device when torch is loaded and initialised, else -1 (the runtime's)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return -1
