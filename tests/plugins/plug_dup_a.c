/* One of two plugins publishing the same name "dupname". */
#define PLUGIN_NAME "dupname"
#define PLUGIN_TAG "dup_a"
#include "plugin_common.h"
