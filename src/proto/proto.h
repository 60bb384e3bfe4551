/*
 * The sbx agent protocol: frame codec and message encoders/decoders.
 *
 * Shared by the host (libsbx, src/kit/client.c) and the in-box agent
 * (src/agent). Plain C and libc only: the agent links it statically.
 * docs/agent-protocol.md describes the wire format.
 *
 * A frame is   u32 length | u8 type | u32 channel | payload
 * (big-endian; `length` counts type + channel + payload, so it is >= 5).
 * Channel 0 carries stream-level frames (hello, ping, stream errors); every
 * other channel is one operation (an exec or a file transfer), opened by the
 * host with a start frame and ended by the agent with EXIT or STATUS.
 */
#ifndef SBX_PROTO_H
#define SBX_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define SBX_PROTO_MAGIC 0x53425831u /* "SBX1" */
/*
 * 2: STDIN_ACK; 3: PTY sessions (proto/pty.h); 4: process listings
 * (proto/procs.h); 5: OUTPUT_ACK, a window per exec on its output.
 */
#define SBX_PROTO_VERSION 5
#define SBX_PROTO_MIN_VERSION 1

#define SBX_PROTO_HEADER 9u /* u32 length + u8 type + u32 channel */
/* The largest payload either side accepts; larger frames close the stream. */
#define SBX_PROTO_MAX_PAYLOAD (4u << 20)
/* The data chunk size both sides send (stdin, stdout, file contents). */
#define SBX_PROTO_CHUNK (256u << 10)
/* Version 5: the output an exec may have in flight to a host that has not taken it. */
#define SBX_PROTO_OUTPUT_WINDOW (1u << 20)

enum sbx_proto_type {
    SBX_MSG_HELLO = 0x01, /* ch 0, both ways: sbx_msg_hello */
    SBX_MSG_ERROR = 0x02, /* ch 0: fatal stream error (i32 errno, str message), then close */
    SBX_MSG_PING = 0x03,  /* host -> agent: u64 cookie */
    SBX_MSG_PONG = 0x04,  /* agent -> host: the same u64 cookie */

    SBX_MSG_EXEC = 0x10,   /* host -> agent: opens an exec channel, sbx_msg_exec */
    SBX_MSG_STDIN = 0x11,  /* host -> agent: bytes; an empty payload is EOF */
    SBX_MSG_STDOUT = 0x12, /* agent -> host: bytes */
    SBX_MSG_STDERR = 0x13, /* agent -> host: bytes */
    SBX_MSG_EXIT = 0x14,   /* agent -> host: sbx_msg_exit; closes the channel */
    SBX_MSG_CANCEL = 0x15, /* host -> agent: kill the exec's group / abort the transfer */
    /* agent -> host (version 2): u64 bytes of STDIN the command's pipe took since the last ACK */
    SBX_MSG_STDIN_ACK = 0x16,
    /*
     * host -> agent (version 5): u64 bytes of STDOUT and STDERR of the exec
     * its caller took since the last ACK. The agent sends at most
     * SBX_PROTO_OUTPUT_WINDOW unacknowledged bytes per exec, then stops
     * reading that command's pipes: a slow reader holds back its own
     * command, not the box's other operations on the same connection.
     */
    SBX_MSG_OUTPUT_ACK = 0x17,

    SBX_MSG_FILE_PUT = 0x20,  /* host -> agent: opens an upload, sbx_msg_file_put */
    SBX_MSG_FILE_GET = 0x21,  /* host -> agent: opens a download, sbx_msg_file_get */
    SBX_MSG_FILE_INFO = 0x22, /* agent -> host: sbx_msg_file_info (download) */
    SBX_MSG_DATA = 0x23,      /* both: file bytes; from the host an empty payload is EOF */
    SBX_MSG_STATUS = 0x24,    /* agent -> host: sbx_msg_status; closes the channel */
};

/* Returns the type's name ("EXEC"), or NULL for an unknown type. */
const char *sbx__proto_type_name(uint8_t type);

/* --- frames -------------------------------------------------------------- */

typedef struct {
    uint8_t type;
    uint32_t channel;
    const uint8_t *payload; /* points into the reader's buffer */
    uint32_t len;
} sbx_frame;

/* Writes the 9-byte header for a frame with `payload_len` bytes of payload. */
void sbx__proto_put_header(uint8_t *out, uint8_t type, uint32_t channel, uint32_t payload_len);

/*
 * A bounds-checked cursor over one payload, for the message decoders:
 * reading past its end (or a decoder refusing a value) latches `bad`, and
 * every later read gives 0, so a decoder checks once at the end.
 */
struct sbx_pcur {
    const uint8_t *p;
    size_t left;
    int bad;
};
uint32_t sbx__pcur_u32(struct sbx_pcur *c);
uint64_t sbx__pcur_u64(struct sbx_pcur *c);
uint8_t sbx__pcur_u8(struct sbx_pcur *c);

/*
 * Parses one frame at the start of buf[0..len). Returns 1 with *frame and
 * *used set, 0 when more bytes are needed, or -1 when the bytes are not a
 * valid frame (length < 5 or payload > max_payload): the stream must close.
 */
int sbx__proto_parse(const uint8_t *buf, size_t len, uint32_t max_payload, sbx_frame *frame,
                     size_t *used);

/*
 * A reassembly buffer for a byte stream. Feed it what the socket gave, then
 * take frames with sbx__proto_reader_next until it returns 0. A frame's
 * payload stays valid until the next feed.
 */
typedef struct {
    uint8_t *buf;
    size_t start, len, cap;
    uint32_t max_payload;
    int broken; /* set once a malformed frame was seen: the stream is dead */
} sbx_proto_reader;

void sbx__proto_reader_init(sbx_proto_reader *r, uint32_t max_payload);
void sbx__proto_reader_free(sbx_proto_reader *r);
/* Space to read into (at least `want` bytes); NULL when out of memory. */
uint8_t *sbx__proto_reader_space(sbx_proto_reader *r, size_t want, size_t *avail);
/* Records that `n` bytes were written into the space. */
void sbx__proto_reader_commit(sbx_proto_reader *r, size_t n);
/* Copies bytes in (space + memcpy + commit). -1 when out of memory. */
int sbx__proto_reader_feed(sbx_proto_reader *r, const void *data, size_t n);
/* 1: a frame; 0: need more bytes; -1: malformed (r->broken is set). */
int sbx__proto_reader_next(sbx_proto_reader *r, sbx_frame *frame);

/* --- payload building ---------------------------------------------------- */

/*
 * A growing buffer that starts with room for the frame header, so a message
 * is built in place and sent as one block. `oom` latches allocation failure.
 */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    int oom;
} sbx_pbuf;

/* Starts a frame: resets `b` and reserves the header. */
void sbx__pbuf_begin(sbx_pbuf *b);
void sbx__pbuf_u8(sbx_pbuf *b, uint8_t v);
void sbx__pbuf_u32(sbx_pbuf *b, uint32_t v);
void sbx__pbuf_u64(sbx_pbuf *b, uint64_t v);
void sbx__pbuf_bytes(sbx_pbuf *b, const void *p, size_t n);
/* u32 length + bytes; NULL is encoded as length 0xffffffff (absent). */
void sbx__pbuf_str(sbx_pbuf *b, const char *s);
/* u32 count + strings; NULL is count 0. */
void sbx__pbuf_strv(sbx_pbuf *b, const char *const *v);
/*
 * Fills in the header. Returns 0, or -1 when out of memory or the payload
 * exceeds SBX_PROTO_MAX_PAYLOAD. The frame is b->data[0..b->len).
 */
int sbx__pbuf_finish(sbx_pbuf *b, uint8_t type, uint32_t channel);
void sbx__pbuf_free(sbx_pbuf *b);

/* --- messages ------------------------------------------------------------ */
/*
 * Decoders check every length against the payload and return 0, or -1 for a
 * malformed payload. Decoded messages are single allocations (strings and
 * arrays inside the same block): free them with free().
 */

typedef struct {
    uint32_t magic;       /* SBX_PROTO_MAGIC */
    uint16_t min_version; /* oldest version this side speaks */
    uint16_t max_version; /* newest version this side speaks */
    uint32_t max_payload; /* the largest payload this side accepts */
    char *software;       /* "sbx-agent 0.1.0" (informational) */
} sbx_msg_hello;

int sbx__msg_hello_encode(sbx_pbuf *b, const sbx_msg_hello *m);
int sbx__msg_hello_decode(const sbx_frame *f, sbx_msg_hello **out);
/* The version both speak, or -1 when the ranges do not overlap. */
int sbx__proto_negotiate(const sbx_msg_hello *a, const sbx_msg_hello *b);

enum {
    SBX_EXEC_STDIN = 1u << 0, /* STDIN frames follow (else the command reads /dev/null) */
    SBX_EXEC_SHELL = 1u << 1, /* argv[0] is a shell command run with /bin/sh -c */
    SBX_EXEC_BUILTIN = 1u << 2, /* argv[0] names an agent built-in (src/agent/tar.h) */
};

typedef struct {
    uint32_t flags;
    int64_t timeout_ms;    /* < 0: none */
    uint64_t output_limit; /* bytes kept per stream; 0: no cap */
    char *cwd;             /* NULL: the agent's */
    char *user;            /* NULL: the agent's */
    char **argv;           /* NULL-terminated, at least one element */
    char **env;            /* NULL-terminated "K=V" overrides, applied in order */
} sbx_msg_exec;

int sbx__msg_exec_encode(sbx_pbuf *b, uint32_t flags, int64_t timeout_ms, uint64_t output_limit,
                         const char *cwd, const char *user, const char *const *argv,
                         const char *const *env, const char *const *env2);
int sbx__msg_exec_decode(const sbx_frame *f, sbx_msg_exec **out);

enum sbx_exit_kind {
    SBX_EXIT_CODE = 0,    /* exited with `code` */
    SBX_EXIT_SIGNAL = 1,  /* killed by signal `code` */
    SBX_EXIT_TIMEOUT = 2, /* the agent killed the group at the deadline */
    SBX_EXIT_FAILED = 3,  /* never ran: `message` says why (cwd, user, fork) */
};

enum {
    SBX_EXITF_STDOUT_TRUNCATED = 1u << 0,
    SBX_EXITF_STDERR_TRUNCATED = 1u << 1,
    /* Killed while the box's memory cgroup counted an oom_kill. */
    SBX_EXITF_OOM = 1u << 2,
    SBX_EXITF_CANCELLED = 1u << 3,
};

typedef struct {
    uint8_t kind;
    int32_t code;
    uint32_t flags;
    char *message; /* "" when none */
} sbx_msg_exit;

int sbx__msg_exit_encode(sbx_pbuf *b, uint8_t kind, int32_t code, uint32_t flags,
                         const char *message);
int sbx__msg_exit_decode(const sbx_frame *f, sbx_msg_exit **out);

/* STATUS ends a file channel (errnum 0: success); ERROR (ch 0) ends the stream. */
typedef struct {
    int32_t errnum; /* a Linux errno value, 0 on success */
    char *message;
} sbx_msg_status;

int sbx__msg_status_encode(sbx_pbuf *b, int32_t errnum, const char *message);
int sbx__msg_status_decode(const sbx_frame *f, sbx_msg_status **out);

typedef struct {
    uint32_t mode;  /* permission bits of the file */
    uint32_t flags; /* reserved, 0 */
    char *path;
} sbx_msg_file;

/* FILE_PUT (mode, flags, path) and FILE_GET (path; mode and flags 0). */
int sbx__msg_file_encode(sbx_pbuf *b, uint32_t mode, uint32_t flags, const char *path);
int sbx__msg_file_decode(const sbx_frame *f, sbx_msg_file **out);

typedef struct {
    uint32_t mode;
    uint64_t size;
} sbx_msg_file_info;

int sbx__msg_file_info_encode(sbx_pbuf *b, uint32_t mode, uint64_t size);
int sbx__msg_file_info_decode(const sbx_frame *f, sbx_msg_file_info *out);

int sbx__msg_u64_encode(sbx_pbuf *b, uint64_t v); /* PING, PONG */
int sbx__msg_u64_decode(const sbx_frame *f, uint64_t *out);

#endif /* SBX_PROTO_H */
