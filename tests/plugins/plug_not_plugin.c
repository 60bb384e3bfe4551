/* A shared object on the plugin path that is not an sbx plugin. */
#include <sbx.h>

SBX_EXPORT int not_an_sbx_plugin(void);
int not_an_sbx_plugin(void) { return 42; }
