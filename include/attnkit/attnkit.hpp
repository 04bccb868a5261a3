// attnkit: attention kernels for LLM inference. Plan once, run on CPU or NVIDIA GPU,
// check against the float64 golden, measure against the hardware limit.
#pragma once
#include "attnkit/cpu.hpp"
#include "attnkit/cuda.hpp"
#include "attnkit/cuda_paged.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/paged.hpp"
#include "attnkit/plan.hpp"
#include "attnkit/problem.hpp"
#include "attnkit/reference.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/tensors.hpp"
#include "attnkit/validate.hpp"
#include "attnkit/version.hpp"
