/*
 * [term] A box's bytes made safe for a terminal (docs/cli.md, "A box's
 * output on a terminal").
 *
 * A terminal obeys what it is sent: ESC starts a command (CSI moves the
 * cursor, rewrites lines, OSC sets the title or the clipboard, DCS talks
 * to the terminal), and so do the C1 controls U+0080..U+009F. The CLI
 * passes what a box printed through this filter when it writes to a
 * terminal (a pipe or a file gets the exact bytes):
 *
 *   - printable ASCII, TAB and LF pass; CR passes only right before LF
 *     (a CRLF line end), so a box cannot return to a line's start and
 *     write over it;
 *   - every other C0 control and DEL shows as cat -v shows it: ESC as
 *     "^[", BEL "^G", a lone CR "^M", DEL "^?";
 *   - valid UTF-8 passes, but the C1 controls it can encode, and every
 *     byte that is not part of valid UTF-8 (overlong forms, surrogates,
 *     bytes past U+10FFFF, a sequence cut short), show as "\xNN" per byte,
 *     so a terminal in an 8-bit mode finds no C1 either.
 *
 * The filter keeps state across calls (a UTF-8 sequence or a CRLF may be
 * split between two reads), one sbx_termesc per output stream.
 */
#ifndef SBX_CORE_TERMESC_H
#define SBX_CORE_TERMESC_H

#include "core/internal.h"

typedef struct {
    unsigned char pend[4]; /* a UTF-8 sequence begun, or a CR */
    size_t npend;
    size_t need;               /* continuation bytes still expected (0: pend is a CR or empty) */
    unsigned char lo, hi;      /* the range of the next continuation byte */
} sbx_termesc;

/* Appends the terminal-safe form of in[0..n) to `out`: SBX_OK or SBX_ENOMEM. */
SBX_INTERNAL int sbx__termesc_feed(sbx_termesc *t, const void *in, size_t n, sbx_buf *out);
/* Appends what was held (a sequence cut short, a CR at the end) and resets `t`. */
SBX_INTERNAL int sbx__termesc_flush(sbx_termesc *t, sbx_buf *out);
/*
 * One field of a table row (a box's process command line, a label): as
 * above, but TAB, LF and CR are escaped too ("^I", "^J", "^M"), so a field
 * stays on its row and in its column. A new string (NULL: out of memory);
 * NULL `s` gives "".
 */
SBX_INTERNAL char *sbx__termesc_field(const char *s);

#endif
