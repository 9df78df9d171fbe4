// The UAPI header, included from one place: it includes "drm.h", which libdrm's include
// directory provides in userspace.
#pragma once

#include <drm/edu_accel.h>
