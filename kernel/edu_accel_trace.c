// SPDX-License-Identifier: GPL-2.0
#define CREATE_TRACE_POINTS
#include "edu_accel_trace.h"
