/*
 * Linked into the C test binaries (not into the plugin): registers the fake
 * providers through the public registration API before main() runs, so every
 * test sees `fake` and `fake_basic` as a plugin user would, and reads their
 * call log in-process.
 */
#include "fakes/fake.h"

#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void register_fakes(void)
{
    sbx_error *e = NULL;
    if (sbx_fake_register(&e) < 0) {
        fprintf(stderr, "cannot register the fake providers: %s\n", sbx_error_message(e));
        abort();
    }
}
