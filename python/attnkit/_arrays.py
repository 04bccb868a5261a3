"""Array-library plumbing: which library an array comes from (numpy, torch, cupy), where it
lives, its attnkit dtype name, allocation with the same library on the same device, and the
stream a CUDA run goes on. Nothing here copies an array."""
from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

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


_LIBRARY_OF_TYPE: dict = {}  # type -> library name: every call asks this several times per tensor


def library(x: Any) -> str:
    """'numpy', 'torch' or 'cupy' for an array of that library; raises TypeError otherwise."""
    kind = type(x)
    name = _LIBRARY_OF_TYPE.get(kind)
    if name is not None:
        return name
    root = kind.__module__.split(".", 1)[0]
    if root in ("numpy", "torch", "cupy"):
        name = root
    elif hasattr(x, "__dlpack__"):
        name = "dlpack"
    else:
        raise TypeError(f"attnkit: expected a numpy, torch or cupy array, got {kind.__name__}")
    _LIBRARY_OF_TYPE[kind] = name
    return name


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
                "float8_e4m3fn for e4m3 prefill inputs and KV caches)")


_NAME_OF_DTYPE: dict = {}  # dtype object -> attnkit name (a str() per call otherwise)


def array_dtype(x: Any) -> str:
    dtype = x.dtype
    try:
        return _NAME_OF_DTYPE[dtype]
    except KeyError:
        name = _NAME_OF_DTYPE[dtype] = dtype_name(dtype)
        return name
    except TypeError:  # an unhashable dtype object: no memo
        return dtype_name(dtype)


def device_of(x: Any) -> tuple[str, int]:
    """('cpu', 0) or ('cuda', index)."""
    lib = library(x)
    if lib == "numpy":
        return ("cpu", 0)
    if lib == "torch":
        return ("cuda", x.get_device()) if x.is_cuda else ("cpu", 0)
    if lib == "cupy":
        return ("cuda", x.device.id)
    kind, index = x.__dlpack_device__()
    return ("cuda", int(index)) if int(kind) == 2 else ("cpu", 0)


def exported(x: Any) -> Any:
    """The array as the native module takes it. Torch tensors go as DLPack capsules made by
    torch.utils.dlpack.to_dlpack: Tensor.__dlpack__ does the same in Python with checks the
    native side repeats (devices, dtypes) or that cannot apply (the run goes on torch's current
    stream, so no stream handshake), and cost ~3 us a tensor, most of a small call's host time.
    A tensor that requires grad goes as detach() (the same memory without the autograd record). A
    torch.float8_e4m3fn tensor goes as a uint8 view of the same memory (not every torch exports
    float8 through DLPack); the native side reads those bytes as e4m3 for the q/k/v of an e4m3
    prefill plan only, and rejects them everywhere else."""
    if x is None or library(x) != "torch":
        return x
    if x.requires_grad:
        x = x.detach()
    torch = _torch()
    if x.dtype is torch.float8:
        x = x.view(torch.dtypes["u8"])
    return torch.to_dlpack(x)


class _Torch:
    """What the hot paths need from torch, looked up once, on first use (numpy users never import
    torch): to_dlpack, empty, float8_e4m3fn (None where torch lacks it), attnkit dtype names to
    torch dtypes, and the current raw stream of a device. torch's compiled code reads the stream
    with torch._C._cuda_getCurrentRawStream (no Stream object per call, ~1 us less); the public
    torch.cuda.current_stream serves where a torch lacks it."""

    def __init__(self):
        import torch
        from torch.utils.dlpack import to_dlpack

        self.to_dlpack, self.empty = to_dlpack, torch.empty
        self.float8 = getattr(torch, "float8_e4m3fn", None)
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
                       "u8": torch.uint8}
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.raw_stream = raw if raw is not None else (lambda index: int(torch.cuda.current_stream(index).cuda_stream))


_torch_helpers: Optional[_Torch] = None


def _torch() -> _Torch:
    global _torch_helpers
    if _torch_helpers is None:
        _torch_helpers = _Torch()
    return _torch_helpers


def _torch_dtype(name: str):
    return _torch().dtypes[name]


def _numpy_dtype(lib_module, name: str):
    if name == "bf16":
        from ._attnkit import Error

        raise Error(f"{lib_module.__name__}: has no bfloat16 dtype. Fix: use torch tensors for bf16, or f32/f16 arrays")
    return {"f32": lib_module.float32, "f16": lib_module.float16, "i32": lib_module.int32, "u8": lib_module.uint8}[name]


def empty(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialised array of `shape` and attnkit `dtype` from `like`'s library, on its device."""
    lib = library(like)
    if lib == "torch":
        return _torch().empty(shape, dtype=_torch_dtype(dtype), device=like.device)
    shape = tuple(int(s) for s in shape)
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
        return _torch().raw_stream(index)
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
