/* A plugin built against provider ABI 1 (before ABI 2 appended to the table): it still loads. */
#define PLUGIN_NAME "abi_one"
#define PLUGIN_TAG "abi1"
#define PLUGIN_ABI1_TABLE 1
#include "plugin_common.h"
