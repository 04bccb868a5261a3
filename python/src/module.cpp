// attnkit._attnkit: the native half of the Python package. The package (python/attnkit/)
// adds allocation, streams, plan caching and the transformers backend on top of it.
#include "attnkit/version.hpp"
#include "bindings.hpp"

NB_MODULE(_attnkit, m) {
  m.doc() = "attnkit native module: plans, CPU/CUDA runs and the float64 golden over DLPack arrays.";
  m.attr("__version__") = ATTNKIT_VERSION_STRING;
  attnkit::python::bind_errors(m);
  attnkit::python::bind_plans(m);
  attnkit::python::bind_runs(m);
  attnkit::python::bind_reference(m);
  attnkit::python::bind_paged_plans(m);
  attnkit::python::bind_paged_runs(m);
  attnkit::python::bind_paged_reference(m);
}
