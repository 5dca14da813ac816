// Strata SDK: start here.
//
// The public SDK is the headers in this directory; this one includes them all.
// Read them in this order:
//   tensor.h        Tensor, its dtypes (scalar_type.h), devices (device.h), factories
//   ivalue.h        IValue and Stack: the boxed calling convention
//   schema.h        FunctionSchema: PyTorch's schema language, parsed and printed
//   infer_schema.h  schemas from C++ kernel types
//   dispatch_key.h  DispatchKey / DispatchKeySet and Note [Dispatch key order]
//   library.h       Library, CppFunction, STRATA_LIBRARY: defining ops, registering kernels
//   dispatcher.h    OperatorHandle, calls, set_kernel_enabled, get_kernel, dump, explain
//   ops.h           the core:: operators, called through the dispatcher
//   dlpack.h        zero-copy exchange with other frameworks
//   error.h         strata::Error, what every API throws
#pragma once

#include "strata/cuda.h"
#include "strata/device.h"
#include "strata/dispatcher.h"
#include "strata/dispatch_key.h"
#include "strata/dlpack.h"
#include "strata/error.h"
#include "strata/half.h"
#include "strata/infer_schema.h"
#include "strata/intrusive_ptr.h"
#include "strata/ivalue.h"
#include "strata/kernel_function.h"
#include "strata/library.h"
#include "strata/local_dispatch_key_set.h"
#include "strata/ops.h"
#include "strata/scalar.h"
#include "strata/scalar_type.h"
#include "strata/schema.h"
#include "strata/storage.h"
#include "strata/sym_int.h"
#include "strata/tag.h"
#include "strata/tensor.h"
