// The lower layer, including a header above it: what check-layers.py must refuse.
#pragma once
#include "top/high.h"
