/*
 * Waiting on futures while staying interruptible. A SIGINT/SIGTERM/SIGHUP
 * must not kill sbx while it holds a box (the box would leak): the handlers
 * only note the signal and poke a self-pipe, and the waiting code cancels
 * the operation and lets its caller stop the box before exiting 128+N.
 *
 * Handlers (not a blocked mask or SIG_IGN) are used on purpose: both of
 * those are inherited by the processes providers spawn, while a handler is
 * reset to the default at exec.
 *
 * A signal that was ignored when sbx started stays ignored (the GNU coding
 * standards' rule): `nohup sbx run ...` must outlive a hangup, and a script's
 * background job must not be stopped by the Ctrl-C meant for the script
 * (bash makes such jobs ignore SIGINT). Overriding that ignore would also
 * open a window, between exec and the handler, where the signal is dropped.
 */
#include "cli/cli.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>

static int sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    int saved = errno;
    if (!got_signal)
        got_signal = sig;
    if (sig_pipe[1] >= 0) {
        ssize_t n = write(sig_pipe[1], "x", 1);
        (void)n;
    }
    errno = saved;
}

/* SIGPIPE: a closed stdout must give EPIPE, not kill sbx with a box alive. */
static void on_sigpipe(int sig) { (void)sig; }

int cli_signals_install(void)
{
    if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocking read of stdin returns EINTR and can stop. */
    sa.sa_flags = 0;
    int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(sigs); i++) {
        struct sigaction was;
        if (sigaction(sigs[i], NULL, &was) < 0)
            return -1;
        if (was.sa_handler == SIG_IGN)
            continue;
        if (sigaction(sigs[i], &sa, NULL) < 0)
            return -1;
    }
    sa.sa_handler = on_sigpipe;
    sa.sa_flags = SA_RESTART;
    return sigaction(SIGPIPE, &sa, NULL);
}

int cli_signal_received(void) { return got_signal; }

int cli_interrupted(const char *what)
{
    int sig = cli_signal_received();
    const char *name = sigabbrev_np(sig);
    cli_error("interrupted by SIG%s%s%s", name ? name : "?", what ? "; " : "", what ? what : "");
    return 128 + sig;
}

int cli_wait(sbx_future *f, sbx_error **err)
{
    if (sig_pipe[0] >= 0 && !got_signal) {
        struct pollfd fds[2] = {
            { .fd = sbx_future_fd(f), .events = POLLIN },
            { .fd = sig_pipe[0], .events = POLLIN },
        };
        while (!sbx_future_done(f) && !got_signal) {
            if (poll(fds, 2, -1) < 0 && errno != EINTR)
                break;
        }
    }
    if (got_signal && !sbx_future_done(f))
        sbx_future_cancel(f);
    return sbx_future_wait(f, -1, err);
}
