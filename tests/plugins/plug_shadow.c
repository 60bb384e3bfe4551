/* A plugin named like the built-in "local": the built-in must win. */
#define PLUGIN_NAME "local"
#define PLUGIN_TAG "shadow"
#define PLUGIN_INIT_FAILS "the shadowed plugin provider was used instead of the built-in"
#include "plugin_common.h"
