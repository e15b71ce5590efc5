// chorus/chorus.h: everything a user needs; see communicator.h for the collectives.
#pragma once

#include "chorus/communicator.h"
#include "chorus/options.h"
#include "chorus/status.h"
#include "chorus/types.h"
