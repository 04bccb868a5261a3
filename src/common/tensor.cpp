#include "attnkit/tensor.hpp"

#include "attnkit/error.hpp"

namespace attnkit {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                                  DeviceKind device, int device_index) {
  if (!(shape.size() <= static_cast<std::size_t>(kMaxRank)))
    fail("TensorView", "rank " + std::to_string(shape.size()) + " is above the maximum of 5",
         "describe the tensor with at most 5 dimensions");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.device_index = device_index;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t s : shape) v.shape[i++] = s;
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

std::int64_t TensorView::span_elements() const {
  std::int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

std::string TensorView::describe() const {
  std::string s(dtype_name(dtype));
  s += "[";
  for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  s += "] ";
  s += device == DeviceKind::kCpu ? "cpu" : "cuda:" + std::to_string(device_index);
  return s;
}

}  // namespace attnkit
