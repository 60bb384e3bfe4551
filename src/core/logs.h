/*
 * Service logs: the file format sbx-shim writes (<box dir>/service.log) and
 * the parser libsbx reads it with (logs.c).
 *
 * The file is a sequence of records, each a 16-byte header and its bytes:
 *
 *   0  'S' 'L'         magic, so a reader that lost its place stops
 *   2  stream          1 stdout, 2 stderr, 3 event (written by the shim)
 *   3  0               reserved
 *   4  u32 LE length   of the bytes that follow, <= SBX_LOG_MAX_RECORD
 *   8  u64 LE time     nanoseconds since the epoch, when the shim read them
 *
 * Only the shim (on the host) writes headers; the box's bytes are payload
 * whose length the shim measured, so a box cannot forge a record boundary.
 * An event record's bytes are "exited N" or "killed N": the service ended;
 * "agent exited N" or "agent killed N": the box's agent (PID 1) died.
 */
#ifndef SBX_CORE_LOGS_H
#define SBX_CORE_LOGS_H

#include <stddef.h>
#include <stdint.h>

#define SBX_LOG_HEADER 16
#define SBX_LOG_MAX_RECORD 65536
#define SBX_LOG_STDOUT 1
#define SBX_LOG_STDERR 2
#define SBX_LOG_EVENT 3
#define SBX_LOG_FILE "service.log"
#define SBX_LOG_OLD_FILE "service.log.1"

/* Fills hdr[SBX_LOG_HEADER] for `len` bytes of `stream` read at `time_ns`. */
void sbx__log_header(unsigned char *hdr, int stream, uint32_t len, uint64_t time_ns);

/* One record as the parser hands it out (data points into the parsed buffer). */
typedef struct {
    int stream;
    uint64_t time_ns;
    const unsigned char *data;
    size_t len;
} sbx_log_record;

typedef enum {
    SBX_LOG_OK = 0,   /* a record was parsed */
    SBX_LOG_MORE = 1, /* the buffer ends inside a record (torn or still being written) */
    SBX_LOG_BAD = 2,  /* not a record: bad magic, stream or length; stop reading */
} sbx_log_result;

/*
 * Parses the record at the start of buf[0..len): on SBX_LOG_OK fills *rec
 * and *used (header and bytes). Never reads past `len`.
 */
sbx_log_result sbx__log_parse(const unsigned char *buf, size_t len, sbx_log_record *rec,
                              size_t *used);

#endif
