// The CUDA entry points of a build without nvcc: each says how to get the real backend.
#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"

namespace attnkit::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  fail(what, "attnkit was built without CUDA", "install the CUDA toolkit (nvcc) and rebuild with -DATTNKIT_CUDA=ON");
}
}  // namespace

bool built() { return false; }
int device_count() { return 0; }
Target target(int) { unavailable("cuda::target"); }
void decode(const DecodePlan&, const DecodeTensors&, Workspace, Stream) { unavailable("cuda::decode"); }
void prefill(const PrefillPlan&, const PrefillTensors&, Workspace, Stream) { unavailable("cuda::prefill"); }
void append_kv(const AppendTensors&, Stream) { unavailable("cuda::append_kv"); }
void fused_rope_append_decode(const DecodePlan&, const FusedDecodeTensors&, const RopeSpec&, Workspace, Stream) {
  unavailable("cuda::fused_rope_append_decode");
}
void apply_rope(TensorView, TensorView, const RopeSpec&, Stream) { unavailable("cuda::apply_rope"); }
void merge_states(const MergeTensors&, Stream) { unavailable("cuda::merge_states"); }

}  // namespace attnkit::cuda
