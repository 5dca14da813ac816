// Symbol visibility for the strata_modes shared library (see strata/export.h).
#pragma once

#define STRATA_MODES_API __attribute__((visibility("default")))
