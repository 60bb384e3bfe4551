/* A working plugin provider named "plugged". */
#define PLUGIN_NAME "plugged"
#define PLUGIN_TAG "good"
#include "plugin_common.h"
