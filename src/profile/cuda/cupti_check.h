// PYLON_CUPTI_CHECK(call): a failing CUPTI call throws pylon::Error with CUPTI's message and the
// call's text, file and line (CUPTI refusing is usually the user's to fix: another profiler
// attached, counters not permitted).
#pragma once

#include <cupti.h>

#include "core/error.h"

#define PYLON_CUPTI_CHECK(call)                                                                   \
  do {                                                                                            \
    const CUptiResult pylon_r_ = (call);                                                          \
    if (pylon_r_ != CUPTI_SUCCESS) {                                                              \
      const char* pylon_s_ = nullptr;                                                             \
      cuptiGetResultString(pylon_r_, &pylon_s_);                                                  \
      throw ::pylon::Error(::pylon::detail::concat(#call, " failed: ", pylon_s_ ? pylon_s_ : "?", \
                                                   " (", __FILE__, ":", __LINE__, ")"));          \
    }                                                                                             \
  } while (0)
