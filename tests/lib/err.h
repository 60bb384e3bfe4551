/*
 * Error slots for tests that make many failing calls in a row: each call
 * gets a fresh slot, the previous call's error freed first.
 */
#ifndef SBX_TESTS_LIB_ERR_H
#define SBX_TESTS_LIB_ERR_H

#include <sbx.h>

/* Frees the previous error in `e` and hands out a fresh slot: f(..., ERR(e)). */
#define ERR(e) (sbx_error_free(e), (e) = NULL, &(e))

#endif
