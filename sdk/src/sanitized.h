// STRATA_SANITIZED: 1 when this translation unit is built with ASan, TSan or MSan
// (GCC's and Clang's spellings), else 0. What a sanitizer checks would be hidden or
// slowed by a per-thread pool (object_pool.cc) or a vector copy loop
// (cast_kernels.cc), so those step aside under one; tests read it to know which.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRATA_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define STRATA_SANITIZED 1
#endif
#endif
#ifndef STRATA_SANITIZED
#define STRATA_SANITIZED 0
#endif
