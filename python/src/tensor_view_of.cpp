// DLPack arrays as attnkit tensor views. The view points at the array's memory: nothing is
// copied, so an output array the caller passes is the one the kernel writes.
#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

// DLPack codes (dlpack.h), spelled out so the mapping does not depend on a nanobind version.
constexpr int kDLInt = 0;
constexpr int kDLUInt = 1;
constexpr int kDLFloat = 2;
constexpr int kDLBfloat = 4;
constexpr int kDLBool = 6;
constexpr int kDLFloat8E4m3fn = 10;  // dlpack.h 1.1
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;  // pinned host memory: the CPU reads it directly

std::string dlpack_dtype_name(const nb::dlpack::dtype& t) {
  std::string kind = "code" + std::to_string(t.code) + "_";
  if (t.code == kDLInt) kind = "int";
  if (t.code == kDLUInt) kind = "uint";
  if (t.code == kDLFloat) kind = "float";
  if (t.code == kDLBfloat) kind = "bfloat";
  if (t.code == kDLBool) kind = "bool";
  if (t.code == kDLFloat8E4m3fn) kind = "float8_e4m3fn";
  std::string name = t.code == kDLFloat8E4m3fn ? kind : kind + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

// `bytes_as_e4m3`: uint8 arrays are e4m3 bytes (prefill inputs of an e4m3 plan).
DType dtype_of(const nb::dlpack::dtype& t, const char* name, bool bytes_as_e4m3) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
    if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
    if (t.code == kDLInt && t.bits == 32) return DType::kI32;
    if (t.code == kDLFloat8E4m3fn && t.bits == 8) return DType::kE4M3;
    if (bytes_as_e4m3 && t.code == kDLUInt && t.bits == 8) return DType::kE4M3;
  }
  fail(name, "dtype " + dlpack_dtype_name(t) + " is not supported",
       "pass float32, float16 or bfloat16 arrays (int32 for lengths, positions and offsets; e4m3, as "
       "torch.float8_e4m3fn or uint8 bytes, for the q/k/v of an e4m3 prefill plan, the caches or page pools of an "
       "e4m3 decode or paged decode plan, and the caches or pools append and paged append write only)");
}

template <class Array>
TensorView view_of_array(const Array& array, const char* name, bool bytes_as_e4m3 = false) {
  TensorView v;
  const int rank = static_cast<int>(array.ndim());
  if (rank > TensorView::kMaxRank)
    fail(name, "rank " + std::to_string(rank) + " is above " + std::to_string(TensorView::kMaxRank),
         "pass the tensor in the documented shape");
  v.data = const_cast<void*>(static_cast<const void*>(array.data()));
  v.dtype = dtype_of(array.dtype(), name, bytes_as_e4m3);
  v.rank = rank;
  for (int i = 0; i < rank; ++i) {
    v.shape[i] = static_cast<std::int64_t>(array.shape(i));
    v.strides[i] = array.stride(i);  // DLPack strides count elements
  }
  const int device = array.device_type();
  if (device == kDLCPU || device == kDLCUDAHost) {
    v.device = DeviceKind::kCpu;
  } else if (device == kDLCUDA) {
    v.device = DeviceKind::kCuda;
    v.device_index = array.device_id();
  } else {
    fail(name, "DLPack device type " + std::to_string(device) + " is not supported",
         "pass a CPU or CUDA tensor (numpy, torch or cupy)");
  }
  // The kernels load whole elements; numpy can export a view at any byte offset (np.frombuffer).
  if (!(reinterpret_cast<std::uintptr_t>(v.data) % dtype_size(v.dtype) == 0))
    fail(name, "the data pointer is not aligned to its " + std::to_string(dtype_size(v.dtype)) + "-byte elements",
         "pass an array from an aligned allocation (a copy is one: numpy x.copy(), torch x.clone())");
  // A zero-element array may carry a null pointer; the views use null for "not given", so it gets
  // a marker, aligned for every dtype (the validation checks element alignment).
  if (v.data == nullptr && v.numel() == 0) {
    alignas(16) static unsigned char empty_marker[16];
    v.data = empty_marker;
  }
  return v;
}

}  // namespace

TensorView view_of(const InArray& array, const char* name) { return view_of_array(array, name); }
TensorView view_of(const OutArray& array, const char* name) { return view_of_array(array, name); }

TensorView input_view_of(const InArray& array, const char* name, DType plan_dtype) {
  return view_of_array(array, name, is_fp8(plan_dtype));
}
TensorView cache_view_of(const std::optional<OutArray>& array, const char* name) {
  return array ? view_of_array(*array, name, true) : TensorView{};
}

TensorView view_of(const std::optional<InArray>& array, const char* name) {
  return array ? view_of_array(*array, name) : TensorView{};
}
TensorView view_of(const std::optional<OutArray>& array, const char* name) {
  return array ? view_of_array(*array, name) : TensorView{};
}

Workspace workspace_of(const std::optional<OutArray>& array) {
  Workspace ws;
  if (!array) return ws;
  ws.data = array->data();
  ws.bytes = array->nbytes();
  ws.device = array->device_type() == kDLCUDA ? DeviceKind::kCuda : DeviceKind::kCpu;
  return ws;
}

}  // namespace attnkit::python
