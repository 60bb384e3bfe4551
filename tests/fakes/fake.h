/*
 * The test doubles `fake` and `fake_basic` (tests/fakes/fake.c): in-memory
 * providers with failures injectable per operation. Not part of libsbx.
 *
 * C test binaries link fake.c and static.c, which registers both providers
 * with sbx_register_provider() before main() runs. The CLI, Python and the
 * scripts load the same source as the plugin build/tests/fakes/sbx-fake.so
 * (SBX_PLUGIN_PATH), which also exports the log functions below.
 */
#ifndef SBX_TESTS_FAKE_H
#define SBX_TESTS_FAKE_H

#include <sbx.h>
#include <sbx/provider.h>

extern const struct sbx_provider_ops sbx_fake_provider;
extern const struct sbx_provider_ops sbx_fake_basic_provider;
extern const struct sbx_provider_ops sbx_fake_boxes_provider;

/* Every call the fake providers saw, "op:arg;" each, process-wide. Caller frees. Thread-safe. */
SBX_EXPORT char *sbx_fake_log(void);
/* Empties the call log. Thread-safe. */
SBX_EXPORT void sbx_fake_log_reset(void);
/* Registers `fake`, `fake_basic` and `fake_boxes` (replacing any registered under those names). */
int sbx_fake_register(sbx_error **err);

#endif
