/*
 * The linux provider's internal interfaces, shared by the provider (in
 * libsbx) and by sbx-shim, the per-box supervisor (src/shim).
 *
 * On-disk layout under the state directory (sbx__linux_state_dir()):
 *
 *   boxes/<id>/record.json   the box record (written by the shim)
 *   boxes/<id>/run/          agent.sock, the agent's listening socket (0600; not
 *                            visible in the box)
 *   boxes/<id>/root/         an empty directory the box's root is built on
 *                            (every mount happens in the box's mount namespace)
 *   images/                  the image store by default (image.c says its layout;
 *                            the image_store key puts it elsewhere)
 *   images/names/, images/sha256-<hex>/  an older sbx's names and flattened trees
 *   images/none-v2/          the skeleton lower layer of the "none" image
 *   userns/<slot>            flock'ed by a userns box's shim: reserves its uid range
 *   teardown.lock            byte-range locks: the teardown slots (teardown.c)
 *   creating/<id>            locked by the box's creator while it creates the box:
 *                            gc leaves such a box alone (sbx__linux_create_lock)
 *   boxes/<id>/teardown      the shim's teardown marker: queued or started, and when
 */
#ifndef SBX_LINUX_H
#define SBX_LINUX_H

#include "core/internal.h"
#include "image/registry.h"
#include "kit/kit.h"

#include <stdint.h>
#include <sys/types.h>

/*
 * A box's defaults scale with the host (defaults.c): these are the shares and
 * bounds. The flat 4096 pids is only used where the kernel says nothing of its
 * pid_max and threads-max.
 */
#define SBX_LINUX_DEFAULT_PIDS 4096
#define SBX_LINUX_PIDS_SHARE 16  /* one box: at most 1/16 of the host's pids */
#define SBX_LINUX_PIDS_FLOOR 1024
#define SBX_LINUX_FILES_SHARE 2  /* one box's pids x nofile: at most 1/2 of file-max */
#define SBX_LINUX_TMPFS_SHARE 8  /* one box's writable tmpfs: at most 1/8 of RAM */
#define SBX_LINUX_MEMORY_SHARE 2 /* memory_cgroup "always": at most 1/2 of RAM */
/*
 * A box's RLIMIT_NOFILE unless configured (nofile): soft 1024, hard from
 * 1024 to 4096 as file-max and the box's pids allow, capped by the creator's
 * hard limit.
 */
#define SBX_LINUX_DEFAULT_NOFILE_SOFT 1024
#define SBX_LINUX_DEFAULT_NOFILE_HARD 4096
#define SBX_LINUX_DEFAULT_READY_TIMEOUT_S 30.0
/* [svc-logs] service.log rotates at this many bytes (one older file kept). */
#define SBX_LINUX_DEFAULT_LOG_MAX_BYTES (8ll << 20)
/* userns: box k's root is host uid BASE + slot * 65536 (see docs/providers/linux.md). */
#define SBX_LINUX_USERNS_BASE 1000000000u
#define SBX_LINUX_USERNS_SLOTS 16384u
/* The skeleton of the "none" image changes with this version. */
#define SBX_LINUX_NONE_IMAGE "none-v2"

/* --- state directory and box records (state.c) -------------------------- */

/*
 * The state directory: `override` when non-NULL and non-empty, else
 * $SBX_STATE_DIR/linux, else /run/sbx/linux for root and
 * $XDG_RUNTIME_DIR/sbx/linux (or /tmp/sbx-<uid>/linux) for others. Malloc'd.
 */
SBX_INTERNAL char *sbx__linux_state_dir(const char *override);

/* A parsed box record. */
typedef struct {
    char *id;
    char *box_dir;
    char *image;
    char *state;    /* "creating", "running", "error" */
    char *hostname;
    char *socket;   /* the agent socket's host path (<box_dir>/run/agent.sock, never read) */
    char *workdir;  /* the spec's workdir, or NULL */
    json_t *env;    /* the spec's env, an array of "K=V"; never NULL once read */
    double created; /* unix seconds */
    double ttl_s;   /* < 0: none */
    double expires; /* unix seconds; 0 when no TTL */
    pid_t shim_pid;
    unsigned long long shim_start; /* /proc/PID/stat starttime, to tell reuse */
    pid_t init_pid;                /* the box's PID 1 (its agent) as the host sees it */
    json_t *metadata;              /* object, never NULL once read */
    json_t *cgroups;               /* array of cgroup directory paths */
    char *service;    /* [svc-logs] "running", "exited", "killed"; NULL: no service */
    int service_code; /* [svc-logs] its exit status or signal */
    /* [endpoint] published ports: [{"port", "host_ip", "host_port"}], or NULL */
    json_t *ports;
} sbx_linux_record;

/*
 * Reads <box_dir>/record.json, which is input like any other: the directory
 * and the record must be the caller's and writable by nobody else (no links
 * followed, at most SBX_RECORD_MAX bytes), the id must be the directory's
 * name and every cgroup the box's own (sbx__cg_path_ok). SBX_ENOENT: no
 * record; SBX_EPERM / SBX_EINVAL: one that is not to be believed.
 */
SBX_INTERNAL int sbx__linux_record_read(const char *box_dir, sbx_linux_record *rec,
                                        sbx_error **err);
/* A box id that can be a path component and a cgroup name: [A-Za-z0-9._-], no leading '.'/'-'. */
SBX_INTERNAL bool sbx__linux_id_ok(const char *id);
/*
 * Whether the record's shim is alive and really that box's shim: its start
 * time, owner (the caller), executable (sbx-shim) and command line
 * (--box-dir naming this box's directory) checked while a pidfd pins it.
 * Returns 1 with *pidfd set (-1 without pidfd support), or 0.
 */
SBX_INTERNAL int sbx__linux_shim_pidfd(const sbx_linux_record *rec, int *pidfd);
SBX_INTERNAL void sbx__linux_record_free(sbx_linux_record *rec);
/* /proc/PID/stat field 22, or 0 when the process is gone. */
SBX_INTERNAL unsigned long long sbx__linux_proc_start(pid_t pid);
/* pidfd_open(), or -1/ENOSYS without pidfds (SBX_LINUX_NO_PIDFD=1 simulates that). */
SBX_INTERNAL int sbx__linux_pidfd_open(pid_t pid);
/* True when the record's shim is the process running under its pid. */
SBX_INTERNAL bool sbx__linux_shim_alive(const sbx_linux_record *rec);
/*
 * Whether a box cannot answer for now though nothing is broken: its agent
 * (the record's init, still the shim's child) is stopped (SIGSTOP) or its
 * processes are frozen (a commit, or a freezer someone set). Status says
 * "paused" for it. Reads /proc and cgroup files; blocks briefly.
 */
SBX_INTERNAL bool sbx__linux_box_paused(const sbx_linux_record *rec);

/*
 * Listing: one entry per box directory under the state directory. The entry
 * says whether its shim is alive. Labels filter by metadata (all must match;
 * NULL or empty: no filter).
 */
typedef struct {
    sbx_linux_record rec;
    bool shim_alive;
    bool expired;
} sbx_linux_box_info;

SBX_INTERNAL int sbx__linux_list(const char *state_dir, const sbx_kv *labels,
                                 sbx_linux_box_info **out, size_t *n_out, sbx_error **err);
SBX_INTERNAL void sbx__linux_list_free(sbx_linux_box_info *boxes, size_t n);

/*
 * Garbage collection. Removes, for every box under the state directory:
 * orphans (shim dead: leftover cgroups, directory) always, and boxes with no
 * believable record past a grace period (their shim, found by its command
 * line, is stopped); (root) cgroups sbx/<id> that no live shim on the host
 * supervises, with the processes in them; expired boxes
 * (TTL passed but still running: its shim is told to stop, then waited for);
 * and, when `labels` is non-empty, every box whose metadata matches them
 * (stopped like expired ones). A box being created (its create lock held:
 * sbx__linux_create_lock) is never touched, whatever else holds. Shims of
 * this state directory whose box directory is gone are hurried (they are
 * ending on their own) but not reported: nothing of their box is left to
 * remove. With `dry_run` nothing is touched. Each removed id is appended to
 * `removed` (a NULL-terminated malloc'd vector, may be NULL).
 */
typedef struct {
    const sbx_kv *labels; /* stop every matching box */
    bool dry_run;
    double stop_timeout_s; /* how long to wait for a shim to finish (default 10) */
    double grace_s;        /* a box with no record is abandoned after this (0: 30 s) */
} sbx_linux_gc_opts;

SBX_INTERNAL int sbx__linux_gc(const char *state_dir, const sbx_linux_gc_opts *opts,
                               char ***removed, sbx_error **err);

/*
 * A box being created. Its creator holds a write lock (an OFD lock, on the
 * whole file) on <state_dir>/creating/<id> from before it starts the box's
 * shim until the create ends: handed over, or failed and torn down. The
 * shim, its directory, its record and its cgroups all come after the lock
 * and go before it is released, so whoever sees any of them, then finds the
 * lock held, knows a live creator is still at it; gc leaves such a box alone
 * (a create killed with its creator releases the lock with the process, and
 * its shim tears the box down on its own).
 *
 * sbx__linux_create_lock: makes creating/ (0700, checked) and takes the
 * lock, waiting for a gc that holds it for a moment. Returns the fd (keep it
 * open for the whole create) or a negative SBX_E* code. Blocking.
 * sbx__linux_create_unlock: removes the file while still holding the lock,
 * then closes `*fd` (sets it to -1); -1 is ignored.
 * sbx__linux_creating: whether `id`'s lock is held by some process. Call it
 * after looking at what it guards, never before.
 */
SBX_INTERNAL int sbx__linux_create_lock(const char *state_dir, const char *id, sbx_error **err);
SBX_INTERNAL void sbx__linux_create_unlock(const char *state_dir, const char *id, int *fd);
SBX_INTERNAL bool sbx__linux_creating(const char *state_dir, const char *id);

/*
 * Stops one box by id: signals its shim and waits up to `timeout_s` for it
 * to exit; removes the leftovers of a dead shim. SBX_ENOENT when there is no
 * such box.
 */
SBX_INTERNAL int sbx__linux_stop_box(const char *state_dir, const char *id, double timeout_s,
                                     sbx_error **err);
/* --- teardown slots and the stop deadline (teardown.c) --------------------- */

/* At most this many teardowns at once, whatever the CPU count. */
#define SBX_LINUX_TEARDOWN_SLOTS_MAX 64
/*
 * Stops of one provider that watch their shim at once (each holds a pidfd);
 * the rest wait their turn. A few teardown slots' worth many times over.
 */
#define SBX_LINUX_STOPS_IN_FLIGHT 128

/*
 * Creates of one provider that run at once (preparing, starting, waiting
 * for the agent); the rest wait their turn, and a box's ready_timeout_s
 * starts when its shim does. 1,000 creates asked for at once on a 2-core
 * machine would otherwise share the CPUs so thinly that each box, not the
 * queue, would take longer than its ready timeout.
 */
#define SBX_LINUX_CREATES_IN_FLIGHT 64

/* A stop waits for a shim queued for a slot at most this many stop timeouts. */
#define SBX_LINUX_STOP_QUEUE_FACTOR 30

/* How many teardowns may run at once on this host (a few per CPU). */
SBX_INTERNAL unsigned sbx__linux_teardown_slots(void);
/*
 * Shim, at its start: creates <box_dir>/teardown marked 'r' (running) and
 * opens <state_dir>/teardown.lock, into fds[0] and fds[1] (-1 where it
 * could not). Made while the host is calm: at a mass stop a file's creation
 * waits on the filesystem's journal behind thousands of teardowns (seconds
 * on ext4), and the marks then only overwrite bytes.
 */
SBX_INTERNAL void sbx__linux_teardown_prepare(const char *state_dir, const char *box_dir,
                                              int fds[2]);
/*
 * Shim: marks <box_dir>/teardown queued, waits for one of `slots` slots on
 * <state_dir>/teardown.lock, marks it started. `prepared`: the descriptors
 * of sbx__linux_teardown_prepare (taken over), or NULL to open them now.
 * Returns the lock's fd (held until the shim exits), or -1 (the teardown
 * then runs without a slot).
 */
SBX_INTERNAL int sbx__linux_teardown_begin(const char *state_dir, const char *box_dir,
                                           unsigned slots, const int prepared[2]);
/*
 * A teardown marker's bytes: 'r' (running, not stopping), 'q' (queued) or
 * 't' (started) with *at its CLOCK_BOOTTIME ns, or 0 for anything else (the
 * file is input: exact length, digits only, no overflow).
 */
SBX_INTERNAL char sbx__linux_teardown_marker_parse(const char *data, size_t len,
                                                   unsigned long long *at);
/*
 * Stop: seconds a stop that has waited `waited_s` for box_dir's shim may
 * still wait. The deadline `timeout_s` counts from the start of the shim's
 * own teardown; a shim queued for a slot is waited for up to
 * SBX_LINUX_STOP_QUEUE_FACTOR x timeout_s, as is one (`pid`) found in the
 * kernel or waiting for a CPU before its first mark; otherwise from the signal.
 * 0: the deadline passed.
 */
SBX_INTERNAL double sbx__linux_stop_time_left(const char *box_dir, pid_t pid, double timeout_s,
                                              double waited_s);
/*
 * For a fork or clone that failed with `err`: when it is EAGAIN and the host
 * is within a tenth of kernel.pid_max or threads-max, a hint naming the limit
 * and how to raise it (" (...)"); else "".
 */
SBX_INTERNAL void sbx__linux_pid_hint(int err, char *buf, size_t len);
/* The hint from the counts themselves (threads on the host, its two limits). */
SBX_INTERNAL void sbx__linux_pid_hint_for(long long threads, long long pid_max,
                                          long long threads_max, char *buf, size_t len);
/* Where box_dir's shim stands in its teardown, in words, for a stop's error. */
SBX_INTERNAL void sbx__linux_stop_where(const char *box_dir, pid_t pid, char *buf, size_t len);

/* Removes what a box with a dead shim left: cgroups, then its directory. */
SBX_INTERNAL int sbx__linux_remove_leftovers(const char *box_dir, const sbx_linux_record *rec);

/* --- defaults scaled to the host (defaults.c) ----------------------------- */

/* What the host has; 0 where the kernel does not say. */
typedef struct {
    long long pid_max;     /* kernel.pid_max */
    long long threads_max; /* kernel.threads-max */
    long long file_max;    /* fs.file-max */
    long long nr_open;     /* fs.nr_open: the highest RLIMIT_NOFILE */
    long long mem_bytes;   /* total RAM */
} sbx_linux_host;

/* Reads /proc/sys and sysinfo(2); never fails (unknown values are 0). */
SBX_INTERNAL void sbx__linux_host_read(sbx_linux_host *h);
/* pids.max of a box that sets no pids_limit. */
SBX_INTERNAL long long sbx__linux_default_pids(const sbx_linux_host *h);
/* The hard RLIMIT_NOFILE of a box that sets no nofile, given its pids limit (0: none). */
SBX_INTERNAL long long sbx__linux_default_nofile_hard(const sbx_linux_host *h, long long pids);
/*
 * The size of a box's writable tmpfs without disk_gib, given its memory
 * limit in bytes (0: none); 0 when nothing is known (the kernel's default).
 */
SBX_INTERNAL long long sbx__linux_default_upper_size(const sbx_linux_host *h,
                                                     long long memory_bytes);
/* memory.max of a box without a memory limit, with memory_cgroup "always"; 0: none. */
SBX_INTERNAL long long sbx__linux_default_memory(const sbx_linux_host *h);

/* --- cgroups (cgroup.c) ---------------------------------------------------- */

typedef enum {
    SBX_CG_NONE = 0, /* no usable cgroup filesystem: limits refused */
    SBX_CG_V1,       /* per-controller hierarchies (possibly hybrid) */
    SBX_CG_V2,       /* unified hierarchy with controllers */
} sbx_cg_mode;

typedef struct {
    long long memory_bytes; /* <= 0: none */
    long long pids;         /* <= 0: none */
    double cpu;             /* <= 0: none */
    /*
     * v1: no memory group without a memory limit (memory_cgroup: "limited").
     * Every memory cgroup costs kernel memory that grows with the number of
     * superblocks on the host (docs/scale.md); an unlimited box's group only
     * accounts. v2 keeps one group with every controller.
     */
    bool memory_only_limited;
} sbx_cg_limits;

/* What is mounted, detected once per process. */
SBX_INTERNAL sbx_cg_mode sbx__cg_mode(void);
/* Writes `val` to the cgroup file `path` in one write: 0, or -errno. */
SBX_INTERNAL int sbx__cg_write(const char *path, const char *val);
/*
 * The name of the level under each cgroup mount that holds the boxes' groups
 * ("sbx" in the paths below): SBX_LINUX_CGROUP when it is a valid name
 * (sbx__cg_name_ok: 1-32 letters, digits, '-', '_'), else "sbx". Read once
 * per process; the shim inherits it.
 */
#define SBX_LINUX_CGROUP_NAME_MAX 32
SBX_INTERNAL const char *sbx__cg_name(void);
SBX_INTERNAL bool sbx__cg_name_ok(const char *name);
/*
 * Creates the box's groups under <root>/sbx/<id> and writes the limits.
 * `paths` receives the created directories (JSON array of strings), so the
 * record can name them for removal. On failure nothing stays created.
 */
SBX_INTERNAL int sbx__cg_create(const char *id, const sbx_cg_limits *lim, json_t **paths,
                                sbx_error **err);
/* Moves `pid` into every group in `paths`. */
SBX_INTERNAL int sbx__cg_attach(const json_t *paths, pid_t pid, sbx_error **err);
/*
 * The cgroup mounts boxes get groups under (NULL-ended), and whether `path`
 * is exactly <one of them>/sbx/<id>: a path from a record must be that box's
 * own group, nothing above, beside or through `..`.
 */
/* The directories that hold box groups (<mount>/sbx, and v2's sbx/.nomem), NULL-ended. */
SBX_INTERNAL const char *const *sbx__cg_parents(void);
SBX_INTERNAL bool sbx__cg_path_ok(const char *path, const char *id);
/*
 * Kills what is left in the groups and removes them (retrying while busy).
 * Paths that are not <cgroup mount>/sbx/<valid id> are skipped.
 */
SBX_INTERNAL int sbx__cg_destroy(const json_t *paths);
/* What the box's groups account (sbx_sandbox_stats' JSON object; nulls for what they do not). */
SBX_INTERNAL json_t *sbx__cg_stats(const json_t *paths);
/* The number of OOM kills in the box's memory group, or -1 when unknown. */
SBX_INTERNAL long long sbx__cg_oom_kills(const json_t *paths);

/* --- freezing a box, and who undoes it (freeze.c says the rules) ------------ */

/*
 * v1: the freezer group a freeze moves box `id` into, <freezer>/sbx/<id>,
 * or with `id` NULL the level that holds them, <freezer>/sbx (malloc'd;
 * NULL: a bad id).
 */
SBX_INTERNAL char *sbx__cg_v1_freezer_group(const char *id);
/*
 * Freezes box `id` (its record's `cgroups`) and waits until each of its
 * processes has stopped (at most 5 s): v2 through its group's
 * cgroup.freeze, v1 through a freezer group of its own. False when it
 * cannot (no freezer), with what it did undone. Blocks.
 */
SBX_INTERNAL bool sbx__cg_freeze(const char *id, const json_t *cgroups);
/*
 * Undoes any freeze sbx makes of box `id`, whoever made it: its own v2
 * groups thawed; its v1 freezer group thawed, the processes moved back to
 * the hierarchy's root and the group removed. Cheap when nothing is frozen;
 * any process, any number of times. `cgroups` may be NULL (v1 only then).
 */
SBX_INTERNAL void sbx__cg_thaw(const char *id, const json_t *cgroups);
/*
 * Whether process `pid` is frozen or being frozen, by whatever froze it: its
 * v1 freezer group's state or its v2 group's (/proc/PID/cgroup). Read only.
 */
SBX_INTERNAL bool sbx__cg_pid_frozen(pid_t pid);
/*
 * A commit's freeze of the box in `box_dir` gets an owner: <box_dir>/freeze,
 * created locked by the calling process. Returns the descriptor that holds
 * the lock (the freeze's lifetime; give it to sbx__linux_freeze_release),
 * or SBX_ESTATE when a live process owns a freeze of the box (another
 * commit). An ownerless file found there is reaped first.
 */
SBX_INTERNAL int sbx__linux_freeze_own(const char *box_dir, const char *id, const json_t *cgroups,
                                       sbx_error **err);
/* Thaws the box, removes <box_dir>/freeze, lets go of the lock `fd` (< 0: nothing). */
SBX_INTERNAL void sbx__linux_freeze_release(const char *box_dir, const char *id,
                                            const json_t *cgroups, int fd);
/*
 * When <box_dir>/freeze exists and no process holds it (its commit died),
 * thaws the box and removes the file. False only when a live owner holds it.
 * One failed open when there is no file: the shim calls it every 2 s.
 */
/*
 * Pause and resume (freeze.c): the box frozen with <box dir>/paused saying
 * it stays so until resumed (a commit's end leaves it frozen). Pause fails
 * with SBX_ENOTSUP where no freezer is available. Both idempotent.
 */
SBX_INTERNAL int sbx__linux_pause(const char *box_dir, const char *id, const json_t *cgroups,
                                  sbx_error **err);
SBX_INTERNAL int sbx__linux_resume(const char *box_dir, const char *id, const json_t *cgroups,
                                   sbx_error **err);
SBX_INTERNAL bool sbx__linux_paused(const char *box_dir);
SBX_INTERNAL bool sbx__linux_freeze_reap(const char *box_dir, const char *id,
                                         const json_t *cgroups);

/* --- images (image.c) ------------------------------------------------------ */

typedef void (*sbx_linux_progress_cb)(const char *stage, uint64_t done, uint64_t total,
                                      void *data);

/* How an import (or a create that unpacks) runs; every field is optional. */
typedef struct {
    sbx_linux_progress_cb progress; /* bytes of the source read so far */
    void *data;                     /* for progress and cancelled */
    /*
     * Polled while unpacking (each 64 KiB read, each entry): true stops the
     * import with SBX_ECANCELED, leaving nothing behind. Called on the
     * importing thread.
     */
    bool (*cancelled)(void *data);
    /*
     * Bytes of file data an import may write (all layers together); past
     * it the import fails (SBX_EINVAL) and leaves nothing. 0: the default,
     * the smaller of 16 GiB and half the free space of the store's
     * filesystem.
     */
    uint64_t max_bytes;
    /*
     * A registry reference not in the store: "missing" (NULL) pulls it,
     * "always" pulls even when present (a moved tag is followed), "never"
     * fails. `registry` holds the registry settings (mirrors, insecure,
     * certs.d, platform); NULL: the defaults.
     */
    const char *pull;
    const struct sbx_pull_opts *registry;
} sbx_linux_image_opts;

/*
 * The OCI layout that registry pulls land in, <store>/oci (its blobs
 * shared by every pulled image), made private when missing. One function
 * so the layout's location can move in one place.
 */
SBX_INTERNAL int sbx__linux_pull_layout(const char *state_dir, const char *store, char **out,
                                        sbx_error **err);

/*
 * Pulls `ref` into the pull layout and imports it under its canonical
 * reference (*canonical, malloc'd, may be NULL). Blocking. Progress goes to
 * opts->progress with stages "pull:STATE:KIND:HEX12" (STATE waiting,
 * downloading, verifying, done, cached, retrying; KIND manifest, config,
 * layer; HEX12 the digest's first 12 hex digits), then the import's stages.
 */
SBX_INTERNAL int sbx__linux_image_pull(const char *state_dir, const char *store, const char *ref,
                                       const sbx_linux_image_opts *opts, char **canonical,
                                       sbx_error **err);

/*
 * Resolves a spec image to a cached read-only root directory:
 *   NULL, "", "none"     -> the skeleton of the "none" image (*none_image = true)
 *   an imported name     -> images/<digest>/rootfs
 *   /abs/dir             -> used in place (not copied)
 *   /abs/file.tar[.gz…]  -> unpacked once, cached by digest
 *   oci:/abs/layout[:tag] or a directory holding oci-layout -> layers applied once
 * Blocking (may unpack). `rootfs` is malloc'd.
 */
SBX_INTERNAL int sbx__linux_image_resolve(const char *state_dir, const char *store,
                                          const char *image, const sbx_linux_image_opts *opts,
                                          char **rootfs, json_t **lowers, bool *none_image,
                                          sbx_error **err);
/*
 * The image store (docs/images.md "The store"): `store` when set, else
 * <state_dir>/images. Every function taking (state_dir, store) uses it;
 * state_dir still holds the none image and the names of an older sbx.
 */
SBX_INTERNAL char *sbx__linux_image_store_dir(const char *state_dir, const char *store);
/*
 * Imports an image given as its layer tarballs (bottom first, any
 * compression libarchive reads, OCI whiteouts honoured) and, optionally,
 * its OCI/Docker image config file, under `name`: for sources that are not
 * an OCI layout (a `docker save` archive unpacked, a squashfs turned into a
 * tar). Each layer goes into the store once (keyed by diff_id, checked
 * against the config's rootfs.diff_ids when they are there); the image's
 * id is the config's sha256 (as Docker's image ID), else that of the
 * diff_ids. `source` is recorded for `ls`. Blocking. SBX_EINVAL: a bad
 * name, config or layer; SBX_ECANCELED.
 */
SBX_INTERNAL int sbx__linux_image_import_layers(const char *state_dir, const char *store,
                                                const char *name, const char *const *layers,
                                                size_t n, const char *config_path,
                                                const char *source,
                                                const sbx_linux_image_opts *opts,
                                                sbx_error **err);
/*
 * The default image_store: NULL (<state_dir>/images) when a state_dir is
 * configured or SBX_STATE_DIR is set, else /var/lib/sbx/linux/images for
 * root and $XDG_DATA_HOME/sbx/linux/images (~/.local/share/...) for others.
 */
SBX_INTERNAL char *sbx__linux_image_store_default(const char *state_dir_configured);
/*
 * The OCI image config's "config" object (Env, WorkingDir, User,
 * Entrypoint, Cmd, ...) of imported name `image`: a new reference, or NULL
 * for an image without one (a tarball, a directory, an older sbx's).
 */
SBX_INTERNAL json_t *sbx__linux_image_config(const char *state_dir, const char *store,
                                             const char *image);
/*
 * Removes image records no name points at, layers no record has, index
 * entries and dead temporaries (`dry_run`: only lists them). `*removed`
 * (optional): a JSON array of "image sha256:..", "layer sha256:..",
 * "temporary". Waits for running imports (the store's exclusive lock).
 */
SBX_INTERNAL int sbx__linux_image_prune(const char *state_dir, const char *store, bool dry_run,
                                        json_t **removed, sbx_error **err);

/* Whether `name` can be given to an import (no '/', not "none", ...). */
SBX_INTERNAL bool sbx__linux_image_name_ok(const char *name);

/*
 * Imports `source` (tarball, directory, OCI layout) under `name`. `progress`
 * (optional) is called with a stage name and bytes done/total. Blocking.
 * SBX_EINVAL: a bad name, or a source that cannot be used (not a regular
 * file or directory, not an archive, `..` entries, a broken OCI layout,
 * past opts->max_bytes); SBX_ENOENT: no such source; SBX_ECANCELED.
 */
SBX_INTERNAL int sbx__linux_image_import(const char *state_dir, const char *store,
                                         const char *name,
                                         const char *source, const sbx_linux_image_opts *opts,
                                         sbx_error **err);

typedef struct {
    char *name;   /* the imported name, or NULL for an unnamed cache entry */
    char *digest; /* "sha256:<hex>" */
    char *source; /* where it came from */
    uint64_t size;
    double created;
} sbx_linux_image_info;

SBX_INTERNAL int sbx__linux_image_list(const char *state_dir, const char *store,
                                       sbx_linux_image_info **out,
                                       size_t *n, sbx_error **err);
SBX_INTERNAL void sbx__linux_image_list_free(sbx_linux_image_info *v, size_t n);
/*
 * Removes the temporary trees of imports whose process is gone; returns how
 * many (with `dry_run`, how many it would). Run by every import and by gc.
 */
SBX_INTERNAL int sbx__linux_image_gc(const char *state_dir, bool dry_run);
/*
 * The same in the image store's directory `images` itself; it also sweeps
 * the pull layout's abandoned partial blobs (sbx__linux_image_gc_partials
 * with SBX_PARTIAL_GRACE_S), which the count leaves out.
 */
SBX_INTERNAL int sbx__linux_image_gc_dir(const char *images, bool dry_run);
/*
 * A partial blob (<images>/oci/blobs/sha256/<hex>.partial) is abandoned when no
 * writer holds its lock and nothing has been written to it for `grace_s`
 * seconds: a killed or failed pull's bytes. Younger ones stay for the next
 * pull of the blob to resume. Removes those (with `dry_run`, counts them);
 * returns how many. Run by gc, by prune (grace 0) and by every pull.
 */
#define SBX_PARTIAL_GRACE_S 3600
SBX_INTERNAL int sbx__linux_image_gc_partials(const char *images, long grace_s, bool dry_run);
/* Removes a name (and its cached tree when no other name points at it). */
SBX_INTERNAL int sbx__linux_image_remove(const char *state_dir, const char *store,
                                         const char *name,
                                         sbx_error **err);

/*
 * An imported name as one JSON object text (malloc'd): name, digest,
 * source, created, size, architecture, os, image_created, layers (the
 * config's diff_ids, when known), config. SBX_ENOENT: no such name.
 */
SBX_INTERNAL int sbx__linux_image_inspect(const char *state_dir, const char *store,
                                          const char *name, char **json_out, sbx_error **err);
/* Gives the image named `src` a second name `name` (replacing what `name` named). */
SBX_INTERNAL int sbx__linux_image_tag(const char *state_dir, const char *store, const char *src,
                                      const char *name, sbx_error **err);

/* --- the box registry's operations (listing.c; provider ABI 2) ------------- */

/*
 * "running", "paused" (sbx__linux_box_paused), "starting", "stopped" (its
 * service ended) or "error" for a listed box (sbx_status_name's words).
 */
SBX_INTERNAL const char *sbx__linux_box_status(const sbx_linux_box_info *b);
/* Each runs on the worker pool and completes `op` as provider.h says. */
SBX_INTERNAL void sbx__linux_op_list(sbx_op *op, const char *state_dir, const char *filter_json);
SBX_INTERNAL void sbx__linux_op_stop_id(sbx_op *op, const char *state_dir, const char *id,
                                        double timeout_s);
SBX_INTERNAL void sbx__linux_op_gc(sbx_op *op, const char *state_dir, const char *store,
                                   const char *opts_json, double timeout_s);
SBX_INTERNAL void sbx__linux_op_image_list(sbx_op *op, const char *state_dir, const char *store);
/* image_pull on the worker pool: pull, then import under the canonical name. */
SBX_INTERNAL void sbx__linux_op_image_pull(sbx_op *op, const char *state_dir, const char *store,
                                           const char *ref, const char *opts_json,
                                           unsigned long long max_image_bytes,
                                           const sbx_pull_opts *registry);
SBX_INTERNAL void sbx__linux_op_image_import(sbx_op *op, const char *state_dir, const char *store,
                                             const char *name, const char *source,
                                             const char *opts_json,
                                             unsigned long long max_image_bytes);
SBX_INTERNAL void sbx__linux_op_image_remove(sbx_op *op, const char *state_dir, const char *store,
                                             const char *name, int force);
SBX_INTERNAL void sbx__linux_op_image_inspect(sbx_op *op, const char *state_dir,
                                              const char *store, const char *name);
SBX_INTERNAL void sbx__linux_op_image_tag(sbx_op *op, const char *state_dir, const char *store,
                                          const char *src, const char *name);
SBX_INTERNAL void sbx__linux_op_image_prune(sbx_op *op, const char *state_dir, const char *store,
                                            const char *opts_json);

/* --- GPUs through CDI spec files (cdi.c) ------------------------------------- */

/* "/etc/cdi", "/var/run/cdi", NULL: where nvidia-ctk and other vendors' tools write. */
extern const char *const sbx__cdi_default_dirs[];
/* Whether `n` can be a CDI device name (letters, digits, '_', '.', ':', '-'). */
SBX_INTERNAL bool sbx__cdi_name_ok(const char *n);
/*
 * Parses one CDI spec (JSON or YAML, `len` bytes, NUL-terminated; `shown`
 * names it in messages) into {"kind", "edits", "devices": {name: edits}},
 * each edits object normalised as {"env": ["K=V"], "devices": [{"path",
 * "host_path", "type" ("c"/"b", absent: any), "major", "minor" (-1: any)}],
 * "mounts": [{"host_path", "container_path", "rw", "recursive"}], "hooks":
 * count}. Pure (no file access); SBX_EINVAL with what was wrong. Fuzzed.
 */
SBX_INTERNAL int sbx__cdi_parse(const char *text, size_t len, const char *shown, json_t **out,
                                sbx_error **err);
/*
 * The edits for `count` GPUs from the CDI specs in `dirs` (NULL-ended; NULL:
 * sbx__cdi_default_dirs), chosen by `gpu_type` (docs/providers/linux.md):
 * the merged normalised edits plus "names" (the qualified devices chosen).
 * Directories and files must be root's or the caller's and writable by
 * nobody else; every device node and mount source is checked on the host
 * (device numbers filled in from it). Blocking (file I/O). SBX_ECREATE when
 * there are not enough devices (naming what was found) or a host path is
 * wrong; SBX_EINVAL / SBX_EPERM for a bad or untrusted spec file.
 */
SBX_INTERNAL int sbx__cdi_resolve(const char *const *dirs, long long count, const char *gpu_type,
                                  json_t **out, sbx_error **err);

/* --- [img-commit] commit a box's writable layer (image_commit.c) ------------ */

/* The store record ({"id", "layers", "config", ...}) of a layered `image`, or NULL and *err. */
SBX_INTERNAL json_t *sbx__linux_image_record(const char *state_dir, const char *store,
                                             const char *image, sbx_error **err);
/*
 * Imports the OCI layout `layout` (a commit's temporary) under `name`
 * without indexing its path as a source; the ref's "source" is `source`.
 * `max_bytes` 0: the default cap. `id_out`: the new image's hex.
 */
SBX_INTERNAL int sbx__linux_image_import_layout(const char *state_dir, const char *store,
                                                const char *name, const char *layout,
                                                const char *source, uint64_t max_bytes,
                                                char id_out[65], sbx_error **err);
/*
 * Turns running box `id`'s writable layer into a new layer over its image
 * and names the result `name`. `opts_json`: {"changes": ["ENV K=V", ...],
 * "pause": bool (default true)}. *json_out: {"id", "name", "layer", "layers"}.
 */
SBX_INTERNAL int sbx__linux_image_commit(const char *state_dir, const char *store,
                                         const char *id, const char *name,
                                         const char *opts_json, uint64_t max_bytes,
                                         char **json_out, sbx_error **err);
/*
 * Tests only (NULL in every program): called by sbx__linux_image_commit once
 * box `id` is frozen and its freeze owned, before the copy, so a test can
 * kill the committing process at that point without racing it.
 */
SBX_INTERNAL extern void (*sbx__linux_commit_frozen_hook)(const char *id);
SBX_INTERNAL void sbx__linux_op_image_commit(sbx_op *op, const char *state_dir,
                                             const char *store, const char *id,
                                             const char *name, const char *opts_json,
                                             unsigned long long max_image_bytes);

/* --- volumes, capabilities, shm (volumes.c, caps.c) --------------------- */

/*
 * The provider-wide settings of docs/volumes.md: the volume store (named
 * volumes), the shared root (shared_volume_options), and the volumes,
 * cap_add and shm_size every box gets.
 */
typedef struct {
    char *store;       /* volume_store; NULL: the default (sbx__linux_volume_store) */
    char *shared_root; /* shared_root; NULL: <store>/../shared */
    json_t *volumes;   /* normalized entries (sbx__linux_volumes_parse), never NULL after init */
    json_t *cap_add;   /* capability names ("NET_ADMIN"), never NULL after init */
    long long shm_size; /* bytes; 0: /dev/shm shares the writable layer's limit */
} sbx_linux_extras;

/*
 * Handles config key `key` when it is one of volumes, cap_add, shm_size,
 * volume_store, shared_root: returns 1 (and SBX_OK in *rc or an error), 0
 * when the key is not one of them.
 */
SBX_INTERNAL int sbx__linux_extras_key(sbx_linux_extras *x, const char *key, const json_t *v,
                                       int *rc, sbx_error **err);
/* Fills the defaults once the config is read; `state_dir_configured` as linux_init got it. */
SBX_INTERNAL int sbx__linux_extras_init(sbx_linux_extras *x, const char *state_dir_configured,
                                        sbx_error **err);
SBX_INTERNAL void sbx__linux_extras_free(sbx_linux_extras *x);
/*
 * Appends the entries of `v` (a list of "SRC:DST[:ro]" strings or
 * {source, target, read_only, type} objects) to `out`, each normalized to
 * {"type": "bind"|"volume"|"shared", "source", "target", "read_only"}.
 * Syntax only (no file is touched); `what` names the setting in messages.
 */
SBX_INTERNAL int sbx__linux_volumes_parse(const json_t *v, const char *what, json_t *out,
                                          sbx_error **err);
/*
 * Resolves parsed entries for the shim (file I/O: a worker): a bind's host
 * path must exist and not be a link; a named volume is made when missing
 * in the store; a shared entry is made under the shared root without
 * following any link. Adds "kind" ("dir"/"file"), "beneath" (shared) and
 * "name" (volume). Returns SBX_ECREATE with a message naming the entry.
 */
SBX_INTERNAL int sbx__linux_volumes_resolve(const char *state_dir, const sbx_linux_extras *x,
                                            json_t *vols, sbx_error **err);
/* `v` a size in bytes (integer) or a string like "64m", "1g", "512k". */
SBX_INTERNAL int sbx__linux_shm_parse(const json_t *v, const char *what, long long *out,
                                      sbx_error **err);
/*
 * Appends the capability names of `v` (a list of strings: "NET_ADMIN",
 * "CAP_SYS_PTRACE", any case) to `out`, normalized without the CAP_ prefix
 * and without duplicates; SBX_EINVAL for an unknown name, SBX_EPERM for one
 * sbx refuses (the message says why). `net`: SBX_LINUX_NET_*; NET_ADMIN is
 * refused with the host's network (it would reach the host's interfaces) and
 * with nat (it would undo the egress policy).
 */
SBX_INTERNAL int sbx__linux_caps_parse(const json_t *v, const char *what, int net,
                                       json_t *out, sbx_error **err);
/* The number of capability `name` (normalized), or -1. */
SBX_INTERNAL int sbx__linux_cap_number(const char *name);
/*
 * provider_options key `key` (volumes, cap_add, shm_size) of one box,
 * parsed into *vols / *caps (made on first use) or *shm.
 */
SBX_INTERNAL int sbx__linux_box_extras_option(const char *key, const json_t *v, json_t **vols,
                                              json_t **caps, long long *shm, sbx_error **err);
/*
 * Sets the box description's "volumes", "cap_add" and "shm_size": the
 * config's, then the metadata validate_runtime_requirements returned
 * ("sbx.cap_add", "sbx.shm_size"), then the box's provider_options (`vols`,
 * `caps`, `shm`; NULL/0 when absent). `net`: SBX_LINUX_NET_*, for NET_ADMIN.
 */
SBX_INTERNAL int sbx__linux_box_extras(const sbx_linux_extras *x, const sbx_spec *spec,
                                       int net, const json_t *vols, const json_t *caps,
                                       long long shm, json_t *desc, sbx_error **err);
/* The provider's extras and state dir when `p` is the linux provider, else NULL. */
SBX_INTERNAL const sbx_linux_extras *sbx__linux_provider_extras(const sbx_provider *p,
                                                                 const char **state_dir,
                                                                 int *net);

/* --- [nat] network "nat": user-mode NAT by pasta, an egress policy (egress.c) --- */
/* The box's network modes (provider_options.network). */
enum { SBX_LINUX_NET_NONE = 0, SBX_LINUX_NET_HOST = 1, SBX_LINUX_NET_NAT = 2 };
/*
 * The addresses of a nat box's side of pasta: fixed, as slirp4netns and
 * Podman use them, so a policy can name them. The gateway is the host's
 * loopback when an allow rule names "host" (pasta maps it), else refused.
 */
#define SBX_NAT_ADDR "10.0.2.100"
#define SBX_NAT_PREFIX 24
#define SBX_NAT_GATEWAY "10.0.2.2"
#define SBX_NAT_DNS "10.0.2.3"
#define SBX_EGRESS_MAX_RULES 256
#define SBX_EGRESS_RULE_MAX 64
/* "A.B.C.D[/LEN][:PORT[-PORT]]" or "host[:PORT[-PORT]]"; ports 0: any port, any protocol. */
struct sbx_egress_rule {
    uint32_t net; /* host byte order */
    uint8_t plen;
    bool host; /* the host gateway (the host's loopback through pasta) */
    uint16_t lo, hi;
};
struct sbx_egress {
    bool deny_default;
    size_t nallow, ndeny;
    struct sbx_egress_rule allow[SBX_EGRESS_MAX_RULES], deny[SBX_EGRESS_MAX_RULES];
};
/* Parses one rule; -1 with `why` saying what is wrong. */
SBX_INTERNAL int sbx__egress_rule_parse(const char *s, struct sbx_egress_rule *r, char *why,
                                        size_t n);
/* provider_options.egress (NULL: allow all but the host); -1 with `why`. */
SBX_INTERNAL int sbx__egress_parse(const json_t *v, struct sbx_egress *out, char *why, size_t n);
/* True when an allow rule names the host: pasta then maps the gateway to the host's loopback. */
SBX_INTERNAL bool sbx__egress_host_allowed(const struct sbx_egress *e);
/*
 * The nftables ruleset (nft syntax, for libnftables) that enforces `e` in a
 * box's namespace; `host_addrs` are the host's own IPv4 addresses (host byte
 * order), always refused. Returns a malloc'd string, NULL without memory.
 */
SBX_INTERNAL char *sbx__egress_nft(const struct sbx_egress *e, const uint32_t *host_addrs,
                                   size_t nhost);

/* --- [netw] box-to-box networks (networks.c, netlink.c; docs/networking.md) --- */

/* The bridge in every network's namespace, and a box's side of its veth pair. */
#define SBX_NET_BRIDGE "sbx0"
#define SBX_NET_BOX_IF "eth0"
/* 1-64 of [A-Za-z0-9_.-], starting with a letter or digit, and not none/host/nat. */
SBX_INTERNAL bool sbx__linux_net_name_ok(const char *name);
/* <state_dir>/networks/<name> (malloc'd). */
SBX_INTERNAL char *sbx__linux_net_dir(const char *state_dir, const char *name);
/* SBX_OK when network `name` exists (its record and namespace); SBX_ECREATE saying what to do. */
SBX_INTERNAL int sbx__linux_net_check(const char *state_dir, const char *name, sbx_error **err);
/*
 * The shim's side, host root, before the box's clone: takes a free address
 * in the network at `dir` for box `id` (a member record), writes its hosts
 * file <box_dir>/hosts and rewrites every member's. *addr (malloc'd) and
 * *prefix receive the box's address.
 */
SBX_INTERNAL int sbx__linux_net_join(const char *dir, const char *id, const char *hostname,
                                     const char *box_dir, char **addr, unsigned *prefix,
                                     sbx_error **err);
/* Drops box `id` from the network at `dir` and rewrites the others' hosts files. */
SBX_INTERNAL void sbx__linux_net_leave(const char *dir, const char *id);
/*
 * The same for a box whose shim could not (killed): drops box `id` (whose
 * directory is `box_dir`, <state>/boxes/<id>) from any network it is in.
 */
SBX_INTERNAL void sbx__linux_net_forget(const char *box_dir, const char *id);
/*
 * After the clone: a veth pair, one end on the network's bridge (named for
 * box `id`, sbx__linux_net_port), the other SBX_NET_BOX_IF in the namespace
 * of `pid`, with the MAC sbx__linux_net_mac gives for `addr`.
 */
SBX_INTERNAL int sbx__linux_net_attach(const char *dir, const char *id, const char *addr,
                                       pid_t pid, sbx_error **err);
/* The bridge-side name of box `id`'s veth: "sbx" and the id's 12 hex digits (IFNAMSIZ). */
SBX_INTERNAL void sbx__linux_net_port(const char *id, char name[16]);
/* A box's MAC: locally administered, 0a:58 and its IPv4 address (as CNI's bridge). -1 if not one. */
SBX_INTERNAL int sbx__linux_net_mac(const char *addr, unsigned char mac[6]);
/*
 * The nftables ruleset of box `id`'s bridge port (sbx-nft loads it in the
 * network's namespace): what arrives from the box is dropped unless it is
 * IPv4 from its own MAC and address, or ARP that says so. NULL: no memory
 * or a bad address.
 */
SBX_INTERNAL char *sbx__linux_net_port_rules(const char *id, const char *addr);
/* The bookkeeping networks_api.c shares (networks.c has the details). */
SBX_INTERNAL json_t *sbx__linux_net_record(const char *dir);
SBX_INTERNAL int sbx__linux_net_lock(const char *dir);
SBX_INTERNAL json_t *sbx__linux_net_members(const char *dir);
SBX_INTERNAL json_t *sbx__linux_net_member_ids(const json_t *members);
SBX_INTERNAL int sbx__linux_net_write_member(const char *dir, const json_t *member);
SBX_INTERNAL char *sbx__linux_net_hosts_text(const json_t *members, const json_t *self);
SBX_INTERNAL int sbx__linux_net_write_hosts(const char *box_dir, const char *text);
/*
 * set_hosts' entries (caller's input, and a box's /etc/hosts lines): a JSON
 * object of at most 256 RFC 1123 names, each an IPv4 or IPv6 literal.
 */
SBX_INTERNAL int sbx__linux_net_hosts_check(const json_t *hosts, sbx_error **err);
/* netlink.c: a route socket in the caller's network namespace, and requests on it. */
SBX_INTERNAL void *sbx__nl_open(void);
SBX_INTERNAL void sbx__nl_close(void *nl);
SBX_INTERNAL int sbx__nl_bridge_add(void *nl, const char *name);
SBX_INTERNAL int sbx__nl_veth_add(void *nl, const char *name, int master, const char *peer,
                                  pid_t peer_pid, const unsigned char peer_mac[6]);
SBX_INTERNAL int sbx__nl_addr_up(void *nl, const char *ifname, const char *addr,
                                 unsigned prefix);

#endif /* SBX_LINUX_H */
