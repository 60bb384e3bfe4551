/*
 * The fake providers as an sbx plugin (build/tests/fakes/sbx-fake.so): put it
 * on SBX_PLUGIN_PATH to use `fake` and `fake_basic` from the CLI, Python or a
 * script. The plugin binds to the host's libsbx (the sbx CLI, a test binary,
 * or libsbx.so loaded by Python) and links no copy of its own.
 */
#include "fakes/fake.h"

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {
    &sbx_fake_provider,
    &sbx_fake_basic_provider,
    &sbx_fake_boxes_provider,
    NULL,
};
