/* A plugin built for another provider ABI: it must be ignored with a warning. */
#define PLUGIN_NAME "wrong_abi"
#define PLUGIN_TAG "bad_abi"
#define PLUGIN_ABI 999
#include "plugin_common.h"
