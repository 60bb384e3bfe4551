/*
 * sbx-agent: the in-box agent. One process, one epoll loop, libc only (it is
 * linked statically and copied into boxes that may have no libc at all).
 *
 *   main.c   command line, the loop, signals, PID 1 duties, listening
 *   conn.c   one protocol stream: frames in, an output queue out
 *   exec.c   commands: fork, process groups, pipes, timeouts, exit status
 *   files.c  uploads and downloads confined to the box root
 *   users.c  user and group lookup in the box's /etc/passwd and /etc/group
 *   pty.c    PTY sessions: terminals and pipe-mode sessions that outlive a stream
 *   ps.c     the box's processes, read from /proc, for PS
 */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"

#define AGENT_VERSION "sbx-agent 0.1.0"
/* Pause reading command output / files once this much waits to be sent on a stream. */
#define AGENT_QUEUE_HIGH (8u << 20)
#define AGENT_QUEUE_LOW (2u << 20)

/* An fd in the epoll set; data.ptr of its event points here. */
struct watch {
    int fd;
    uint32_t events; /* what is currently registered (0: none) */
    void (*cb)(struct watch *w, uint32_t events);
};

void watch_init(struct watch *w, int fd, void (*cb)(struct watch *, uint32_t));
/* Registers or changes the interest set (0 removes it from epoll). */
void watch_set(struct watch *w, uint32_t events);
/* Removes it from epoll and closes the fd. */
void watch_close(struct watch *w);

/* Frees `p` with `fn` after the current batch of events (events may still point at it). */
void agent_defer_free(void *p, void (*fn)(void *));
int64_t agent_now_ms(void);
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* In a child before exec: the descriptor limit the agent started with (async-signal-safe). */
void agent_restore_limits(void);
/*
 * The shell that runs a shell-form exec (`SHELL -c COMMAND`): its path and
 * its argv[0] (the path's last component, so bash runs as bash, not in sh
 * mode). Chosen once, at startup: --shell, or bash when it is on PATH, else
 * /bin/sh (what the reference's docker provider picks).
 */
extern const char *agent_shell_path;
extern const char *agent_shell_arg0;
/* Sets them from `want` ("auto" or NULL: bash if found, else /bin/sh; a name: found on PATH). */
void agent_choose_shell(const char *want);
/*
 * [direct] A shell-form command of plain words, run without the shell
 * (direct.c). direct_init() learns the shell's kind (bash, dash, other);
 * direct_plan() says whether `cmd` may skip the shell with the environment
 * `envp` (0, and *d filled; -1: the shell is needed; -2: out of memory);
 * direct_exec() runs in the child and returns only when nothing could be
 * exec'd, for the shell to run the command instead.
 */
struct direct {
    char **argv;           /* the command's words (one block) */
    char **envp;           /* the environment the shell would give, with its slots */
    int pwd_slot, under_slot; /* envp slots filled in the child (-1: none) */
    const char *pwd_given; /* the environment's PWD, kept when it names the directory */
};
void direct_init(const char *shell_path);
int direct_words(const char *cmd, char ***argv_out);
int direct_plan(const char *cmd, char *const *envp, struct direct *d);
void direct_exec(struct direct *d, char *const *envp_for_path);
void direct_free(struct direct *d);

/*
 * The user of an exec that names none, and of the entrypoint: --user (the
 * image's User, "name", "uid", "uid:gid", "name:group"), NULL: the agent's
 * own (root). Resolved in the box's /etc/passwd at each use, as Docker does.
 */
extern const char *agent_default_user;

/* --- connections --------------------------------------------------------- */

enum chan_kind { CHAN_EXEC, CHAN_PUT, CHAN_GET, CHAN_PTY };

/* The head of every per-channel object, linked in its connection. */
struct chan {
    uint32_t id;
    enum chan_kind kind;
    struct chan *next;
};

struct obuf {
    struct obuf *next;
    uint8_t *data;
    size_t len, off;
};

struct conn {
    struct watch in, out; /* the same fd for a socket; stdin/stdout in --stdio mode */
    bool same_fd;
    struct conn *next;
    sbx_proto_reader rd;
    bool got_hello;
    bool dead;
    bool write_failed;  /* closed from conns_pump(), never inside a send */
    bool exit_on_close; /* --stdio: the agent exits when this stream ends */
    struct obuf *qhead, *qtail;
    size_t queued;
    bool throttled; /* queued passed AGENT_QUEUE_HIGH: output sources are paused */
    int version;    /* the negotiated protocol version (0 before the hello) */
    struct chan *chans;
};

struct conn *conn_new(int fd_in, int fd_out);
/* Queues a finished frame (takes b->data) and tries to write it at once. */
void conn_send(struct conn *c, sbx_pbuf *b, uint8_t type, uint32_t channel);
/* Sends a frame with a raw payload. */
void conn_send_raw(struct conn *c, uint8_t type, uint32_t channel, const void *p, size_t n);
/* Ends the stream: stops its commands and transfers, closes it. */
void conn_close(struct conn *c, const char *why);
void conn_chan_add(struct conn *c, struct chan *ch);
void conn_chan_remove(struct conn *c, struct chan *ch);
struct chan *conn_chan_find(struct conn *c, uint32_t id);
/* Restarts paused output sources once the queue drained. */
void conn_resume(struct conn *c);
/* Called after each batch of events: moves pending downloads forward. */
void conns_pump(void);

/* --- execs --------------------------------------------------------------- */

/* The start functions return -1 for a malformed payload (a protocol error). */
int exec_start(struct conn *c, uint32_t ch, const sbx_frame *f);
void exec_stdin(struct conn *c, struct chan *ch, const sbx_frame *f);
void exec_cancel(struct chan *ch);
/* The stream closed: kill the group, forget the stream. */
void exec_detach(struct chan *ch);
void exec_resume(struct chan *ch);
void exec_output_ack(struct chan *ch, uint64_t n);
/* A reaped child: returns true when it was one of ours. */
bool exec_reaped(pid_t pid, int status);
/* Kills groups whose deadline passed; returns ms until the next deadline (-1: none). */
int exec_check_timeouts(void);
/* Kills every command's process group (SIGTERM path). */
void exec_kill_all(void);

/*
 * Starts `m`'s command (user, cwd, env exactly as an exec's) on the given
 * fds; `ctty`: in_fd is a terminal that becomes its controlling terminal.
 * Waits for the execve (not the command). Returns the pid, or -1 with `msg`.
 */
pid_t exec_spawn(const sbx_msg_exec *m, int in_fd, int out_fd, int err_fd, bool ctty, char *msg,
                 size_t msg_len);

/* --- PTY sessions (pty.c) ------------------------------------------------ */

/* Handles a PTY frame (PTY_OPEN, PTY_ATTACH, STDIN, CANCEL, ... on a PTY channel). -1: malformed. */
int pty_frame(struct conn *c, struct chan *ch, const sbx_frame *f);
/* The stream closed: its sessions are detached (they keep running). */
void pty_detach(struct chan *ch);
void pty_resume(struct chan *ch);
/* A reaped child: true when it was a session's. */
bool pty_reaped(pid_t pid, int status);
/* SIGTERM path: hang up every session. */
void pty_kill_all(void);
/* Answers PTY_LIST on channel `ch` with PTY_SESSIONS (which ends it). */
void pty_list(struct conn *c, uint32_t ch);

/* --- process listing (ps.c) ---------------------------------------------- */

/* Answers PS on channel `ch` with PS_LIST: the processes /proc shows, bounded. */
void ps_list(struct conn *c, uint32_t ch);

/* --- files --------------------------------------------------------------- */

/* Sets the root directory file operations resolve in. */
int files_set_root(const char *root);
/*
 * Opens `path` resolved inside the root: ".." stops at the root and absolute
 * symlinks are anchored at it (openat2 RESOLVE_IN_ROOT, or a manual walk).
 */
int root_open(const char *path, int flags, mode_t mode);
int file_put_start(struct conn *c, uint32_t ch, const sbx_frame *f);
void file_put_data(struct conn *c, struct chan *ch, const sbx_frame *f);
int file_get_start(struct conn *c, uint32_t ch, const sbx_frame *f);
/* Sends what it can of a download; false when the queue is full. */
bool file_get_pump(struct conn *c, struct chan *ch);
/* Drops a transfer (cancel or stream end). */
void file_abort(struct conn *c, struct chan *ch);

/* --- users --------------------------------------------------------------- */

struct user_ids {
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    size_t n_groups;
    char *name; /* NULL when the user has no passwd entry */
    char *home;
};

/* Resolves "name", "uid", "uid:gid", "name:group" in the root's /etc files. */
int users_resolve(const char *spec, struct user_ids *out, char *msg, size_t msg_len);
void users_free(struct user_ids *u);

/* --- forwarded TCP connections (forward.c) [endpoint] -------------------- */

/*
 * FORWARD on `channel`: connects to 127.0.0.1:port in the box and turns the
 * stream into that connection (conn_hand_over). -1: a malformed payload.
 */
int forward_start(struct conn *c, uint32_t channel, const sbx_frame *f);
/*
 * Takes a socket stream's fd away from `c` (which closes without closing
 * it): its unsent frames (*pending, malloc'd) and the bytes read past the
 * current frame (*rest, malloc'd). Returns the fd, or -1.
 */
int conn_hand_over(struct conn *c, uint8_t **pending, size_t *pending_len, uint8_t **rest,
                   size_t *rest_len);

#endif /* SBX_AGENT_H */
