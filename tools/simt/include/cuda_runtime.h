// simt stand-in for the CUDA runtime header (see simt/simt.h).
#pragma once

#include "simt/simt.h"
