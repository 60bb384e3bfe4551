/*
 * restbox's parts shared by its two files: restbox.c (the provider) and
 * restbox_pty.c (its terminals, provider ABI 3's pty_open over a WebSocket).
 */
#ifndef RESTBOX_H
#define RESTBOX_H

#include <sbx/http.h>
#include <sbx/provider.h>

struct restbox {
    sbx_http_client *http;
};

struct rbox {
    char *id;
};

/* "/v1/boxes/ID" followed by `rest` (or nothing), ID escaped; malloc'd, NULL when out of memory. */
char *rb_box_path(const char *id, const char *rest);

/* restbox_pty.c: opens or attaches to a terminal session of `box`. */
void rb_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s);

#endif
