// The upper layer.
#pragma once
#include "bottom/low.h"
