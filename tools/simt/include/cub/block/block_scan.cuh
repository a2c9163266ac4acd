// simt stand-in for CUB's BlockScan (see cub/simt_cub.h).
#pragma once

#include "../simt_cub.h"
