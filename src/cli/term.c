/*
 * [term] A box's output on our terminal (docs/cli.md, "A box's output on a
 * terminal"): what a box printed reaches stdout or stderr through these
 * writers, which neutralise control sequences (src/core/termesc.h) when
 * the descriptor is a terminal and --raw was not given. A pipe or a file
 * gets the exact bytes, as `ls` prints names raw to a pipe and with -q's
 * question marks to a terminal.
 */
#include "cli/cli.h"
#include "core/termesc.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>

void cli_out_init(struct cli_out *o, int fd, bool raw)
{
    *o = (struct cli_out){ .fd = fd, .clean = !raw && isatty(fd) };
}

static int put(struct cli_out *o, const sbx_buf *b)
{
    return b->len ? cli_write_all(o->fd, b->data, b->len) : 0;
}

int cli_out_write(struct cli_out *o, const void *data, size_t len)
{
    if (!o->clean)
        return cli_write_all(o->fd, data, len);
    sbx_buf b = { 0 };
    int rc = -1;
    if (sbx__termesc_feed(&o->esc, data, len, &b) < 0)
        errno = ENOMEM;
    else
        rc = put(o, &b);
    sbx__buf_free(&b);
    return rc;
}

int cli_out_flush(struct cli_out *o)
{
    if (!o->clean)
        return 0;
    sbx_buf b = { 0 };
    int rc = -1;
    if (sbx__termesc_flush(&o->esc, &b) < 0)
        errno = ENOMEM;
    else
        rc = put(o, &b);
    sbx__buf_free(&b);
    return rc;
}

/*
 * The exec's output to a terminal: the library writes the command's bytes
 * into a pipe (it writes a pipe without ever blocking its loop), and a
 * thread of ours writes them to the terminal, neutralised. A terminal that
 * cannot be written any more (hung up) closes the pipe's reading end, so
 * the library sees EPIPE and ends the command as for a closed stdout.
 */
struct cli_tty_pipe {
    pthread_t thread;
    int rfd, wfd;
    struct cli_out out;
};

static void *pump(void *arg)
{
    struct cli_tty_pipe *tp = arg;
    char buf[65536];
    for (;;) {
        ssize_t n = read(tp->rfd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (cli_out_write(&tp->out, buf, (size_t)n) < 0)
            break;
    }
    (void)cli_out_flush(&tp->out);
    close(tp->rfd);
    tp->rfd = -1;
    return NULL;
}

int cli_tty_pipe_start(int fd, bool raw, struct cli_tty_pipe **out, int *wfd)
{
    *out = NULL;
    *wfd = fd;
    if (raw || !isatty(fd))
        return 0;
    struct cli_tty_pipe *tp = calloc(1, sizeof(*tp));
    int p[2];
    if (!tp || pipe2(p, O_CLOEXEC) < 0) {
        free(tp);
        return -1;
    }
    tp->rfd = p[0];
    tp->wfd = p[1];
    cli_out_init(&tp->out, fd, false);
    /* The thread takes no signal: SIGINT and SIGTERM are the main thread's to notice. */
    sigset_t all, was;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &was);
    int rc = pthread_create(&tp->thread, NULL, pump, tp);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    if (rc != 0) {
        close(p[0]);
        close(p[1]);
        free(tp);
        errno = rc;
        return -1;
    }
    *out = tp;
    *wfd = p[1];
    return 0;
}

void cli_tty_pipe_end(struct cli_tty_pipe *tp)
{
    if (!tp)
        return;
    /* Our end closed, the thread reads to the end of what the exec wrote and ends. */
    close(tp->wfd);
    pthread_join(tp->thread, NULL);
    free(tp);
}

char *cli_field(const char *s)
{
    /* Out of memory: "?" stands in, never the raw field. */
    char *f = sbx__termesc_field(s);
    return f ? f : strdup("?");
}
