// Everything of hostrt's C++ API.
#pragma once

#include "hostrt/device.hpp"
#include "hostrt/error.hpp"
#include "hostrt/event.hpp"
#include "hostrt/host_memory.hpp"
#include "hostrt/stream.hpp"
#include "hostrt/types.hpp"
