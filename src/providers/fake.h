/* The fake provider's test hooks. */
#ifndef SBX_PROVIDERS_FAKE_H
#define SBX_PROVIDERS_FAKE_H

#include "core/internal.h"

SBX_INTERNAL extern const struct sbx_provider_ops sbx__fake_provider;
SBX_INTERNAL extern const struct sbx_provider_ops sbx__fake_basic_provider;
/* Every call the fake providers saw, "op:arg;" each, process-wide. Caller frees. */
SBX_INTERNAL char *sbx__fake_log(void);
SBX_INTERNAL void sbx__fake_log_reset(void);

#endif
