/* The built-in providers, in one table. */
#include "core/internal.h"
#include "providers/fake.h"

SBX_INTERNAL extern const struct sbx_provider_ops sbx__local_provider;
SBX_INTERNAL extern const struct sbx_provider_ops sbx__linux_provider;

/*
 * The fake providers are built in so the CLI, the Python binding and sbxd
 * can be tested end to end; they touch nothing outside the process.
 */
static const struct sbx_provider_ops *const builtins[] = {
    &sbx__fake_provider,
    &sbx__fake_basic_provider,
    &sbx__linux_provider,
    &sbx__local_provider,
    NULL,
};

const struct sbx_provider_ops *const *sbx__builtin_providers(void) { return builtins; }
