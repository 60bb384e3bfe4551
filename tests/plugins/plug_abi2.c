/* A plugin built against provider ABI 2 (before ABI 3 appended pty_open): it still loads. */
#define PLUGIN_NAME "abi_two"
#define PLUGIN_TAG "abi2"
#define PLUGIN_ABI2_TABLE 1
#include "plugin_common.h"
