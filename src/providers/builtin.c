/* The built-in providers, in one table. The test doubles live in tests/fakes. */
#include "core/internal.h"

SBX_INTERNAL extern const struct sbx_provider_ops sbx__local_provider;
SBX_INTERNAL extern const struct sbx_provider_ops sbx__linux_provider;
SBX_INTERNAL extern const struct sbx_provider_ops sbx__docker_provider;

static const struct sbx_provider_ops *const builtins[] = {
    &sbx__linux_provider,
    &sbx__local_provider,
    &sbx__docker_provider,
    NULL,
};

const struct sbx_provider_ops *const *sbx__builtin_providers(void) { return builtins; }
