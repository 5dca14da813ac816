// Symbol visibility for the strata SDK shared library: everything is hidden
// (CMAKE_CXX_VISIBILITY_PRESET) except what is marked STRATA_API.
#pragma once

#define STRATA_API __attribute__((visibility("default")))
