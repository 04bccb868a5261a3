// attnkit::Error surfaces in Python as attnkit.Error, a ValueError carrying the same
// "<context>: <problem>. Fix: <how>" message.
#include "attnkit/error.hpp"
#include "bindings.hpp"

namespace attnkit::python {

void bind_errors(nb::module_& m) {
  nb::exception<Error>(m, "Error", PyExc_ValueError);
}

}  // namespace attnkit::python
