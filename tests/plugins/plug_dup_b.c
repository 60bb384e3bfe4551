/* The other plugin publishing "dupname". */
#define PLUGIN_NAME "dupname"
#define PLUGIN_TAG "dup_b"
#include "plugin_common.h"
