/*
 * shim.c - an LD_PRELOAD library for sqlq's fault tests: it makes chosen file
 * operations fail (or return flipped bytes) and shifts the wall clock.
 *
 * Built at test time by the `fault_shim` fixture (tests/faults/conftest.py):
 *
 *     gcc -shared -fPIC -O2 -Wall -Wextra -o libsqlqfault.so shim.c -ldl -pthread
 *
 * and loaded with LD_PRELOAD=.../libsqlqfault.so SQLQ_FAULT_CTL=/path/to/ctl.
 *
 * THE CONTROL FILE
 * ----------------
 * $SQLQ_FAULT_CTL names a text file that the shim reads again on every
 * intercepted call (with the real functions, so there is no recursion).  A
 * missing or empty file (or an unset variable) means no faults and no clock
 * shift.  Write the file atomically (a temporary file renamed over it): a call
 * that reads half a file acts on half a file.  One directive per line, blank
 * lines and '#' comments ignored, fields separated by spaces:
 *
 *   fault op=<ops> path=<pattern> [errno=<E>] [after=<N>] [count=<M>]
 *         [action=fail|flip] [min_offset=<bytes>]
 *
 *       op       comma-separated classes or function names:
 *                  write     write, pwrite(64), writev, pwritev(64)
 *                  read      read, pread(64), readv, preadv(64)
 *                  sync      fsync, fdatasync          (alias: fsync)
 *                  truncate  ftruncate(64)
 *                or a function: op=pwrite is pwrite and pwrite64 (programs
 *                built with 64-bit offsets, Python too, call pwrite64), the
 *                same for pread, pwritev, preadv, ftruncate; op=pwrite64 or
 *                op=fdatasync name just that one.
 *                (SQLite 3.53 in pysqlite3 uses pread64, pwrite64, fsync,
 *                ftruncate64 and, for its -shm file, mmap - not intercepted.)
 *       path     a substring of the file's path as readlink("/proc/self/fd/N")
 *                gives it; a trailing '$' anchors it at the end, so
 *                "queue.db$" is the main database and not queue.db-wal.
 *       errno    EIO (the default), ENOSPC, EDQUOT, EROFS, EFBIG, EBADF,
 *                EACCES, EPERM, EINTR, EAGAIN, ENOMEM, EINVAL, ENXIO, or a number.
 *                (SQLite retries EINTR at once: give EINTR a count, or it spins.
 *                It reports EIO, ENXIO and ERANGE on a read as SQLITE_CORRUPT.)
 *       after    let the first N matching calls through (default 0) ...
 *       count    ... then act on the next M (default -1: on every one from then on).
 *       action   fail (default): return -1 with errno set; nothing is done.
 *                flip: do the real read, then invert every byte it returned
 *                (reads only): a corrupt page, without touching the file.
 *       min_offset  only positioned calls (pread*, pwrite*) at this offset or
 *                beyond match; calls without an offset never match then.
 *
 *   clock_offset=<seconds>
 *       a float (may be negative) added to what clock_gettime() returns for
 *       CLOCK_REALTIME and CLOCK_REALTIME_COARSE, to gettimeofday() and to time().
 *       Python's time.time() uses clock_gettime(CLOCK_REALTIME); monotonic
 *       clocks are never shifted.
 *
 *   log=<path>
 *       append one line per fault acted on:
 *       "<function> fd=<n> <file path> rule=<i> errno=<e>|flip\n".
 *
 * At most 16 fault lines; a file longer than 16 KiB is cut there.  Rules are
 * tried in order and the first one that acts decides; rules after it do not
 * count that call.  The counters (after/count) of every rule restart whenever
 * the file's contents change, so writing a rule again with any change (e.g. a
 * "# 2" comment line) arms it again; rewriting identical contents does not.
 *
 * Cost: one open() per intercepted call (which fails at once when the file is
 * missing), otherwise open/read/close of the file; readlink() only for calls
 * that a rule could match.
 * Thread-safe (one mutex), fork-safe (the child starts with a fresh mutex).
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 16
#define CTL_MAX (16 * 1024)
#define PATTERN_MAX 256
#define LOG_PATH_MAX 1024

/* --- the intercepted functions ------------------------------------------- */

enum fn {
    F_WRITE, F_PWRITE, F_PWRITE64, F_WRITEV, F_PWRITEV, F_PWRITEV64,
    F_READ, F_PREAD, F_PREAD64, F_READV, F_PREADV, F_PREADV64,
    F_FSYNC, F_FDATASYNC,
    F_FTRUNCATE, F_FTRUNCATE64,
    F_COUNT
};

static const char *const FN_NAMES[F_COUNT] = {
    "write", "pwrite", "pwrite64", "writev", "pwritev", "pwritev64",
    "read", "pread", "pread64", "readv", "preadv", "preadv64",
    "fsync", "fdatasync",
    "ftruncate", "ftruncate64",
};

#define BIT(f) (1u << (f))
#define OPS_WRITE \
    (BIT(F_WRITE) | BIT(F_PWRITE) | BIT(F_PWRITE64) | BIT(F_WRITEV) | BIT(F_PWRITEV) | \
     BIT(F_PWRITEV64))
#define OPS_READ \
    (BIT(F_READ) | BIT(F_PREAD) | BIT(F_PREAD64) | BIT(F_READV) | BIT(F_PREADV) | BIT(F_PREADV64))
#define OPS_SYNC (BIT(F_FSYNC) | BIT(F_FDATASYNC))
#define OPS_TRUNCATE (BIT(F_FTRUNCATE) | BIT(F_FTRUNCATE64))

static struct {
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    ssize_t (*pwrite64)(int, const void *, size_t, off64_t);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
    ssize_t (*pwritev64)(int, const struct iovec *, int, off64_t);
    ssize_t (*read)(int, void *, size_t);
    ssize_t (*pread)(int, void *, size_t, off_t);
    ssize_t (*pread64)(int, void *, size_t, off64_t);
    ssize_t (*readv)(int, const struct iovec *, int);
    ssize_t (*preadv)(int, const struct iovec *, int, off_t);
    ssize_t (*preadv64)(int, const struct iovec *, int, off64_t);
    int (*fsync)(int);
    int (*fdatasync)(int);
    int (*ftruncate)(int, off_t);
    int (*ftruncate64)(int, off64_t);
    int (*clock_gettime)(clockid_t, struct timespec *);
} real;

static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void *next_symbol(const char *name) {
    void *found = dlsym(RTLD_NEXT, name);
    if (found == NULL) {
        /* Nothing sensible to fall back on: say so (with the real write) and stop. */
        char line[256];
        int n = snprintf(line, sizeof line, "sqlq fault shim: dlsym(%s) failed\n", name);
        if (real.write != NULL && n > 0) real.write(2, line, (size_t)n);
        abort();
    }
    return found;
}

static void resolve(void) {
    real.write = next_symbol("write");
    real.pwrite = next_symbol("pwrite");
    real.pwrite64 = next_symbol("pwrite64");
    real.writev = next_symbol("writev");
    real.pwritev = next_symbol("pwritev");
    real.pwritev64 = next_symbol("pwritev64");
    real.read = next_symbol("read");
    real.pread = next_symbol("pread");
    real.pread64 = next_symbol("pread64");
    real.readv = next_symbol("readv");
    real.preadv = next_symbol("preadv");
    real.preadv64 = next_symbol("preadv64");
    real.fsync = next_symbol("fsync");
    real.fdatasync = next_symbol("fdatasync");
    real.ftruncate = next_symbol("ftruncate");
    real.ftruncate64 = next_symbol("ftruncate64");
    real.clock_gettime = next_symbol("clock_gettime");
}

#define RESOLVE() pthread_once(&resolved, resolve)

/* --- the control file ----------------------------------------------------- */

struct rule {
    unsigned ops;
    char pattern[PATTERN_MAX];
    size_t pattern_len;
    int anchored;
    int err;
    long long after, count, min_offset;
    int flip;
    long long seen, acted;
};

static struct {
    char text[CTL_MAX];
    size_t len;
    int loaded; /* text/len hold the last contents read (0: none yet) */
    struct rule rules[MAX_RULES];
    int nrules;
    double clock_offset;
    char log[LOG_PATH_MAX];
} ctl;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Set while this thread is inside the shim: any call it makes passes through. */
static __thread int busy __attribute__((tls_model("initial-exec")));

static void after_fork_in_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    lock = fresh;
    busy = 0;
}

__attribute__((constructor)) static void init(void) {
    RESOLVE();
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

static const struct {
    const char *name;
    int value;
} ERRNOS[] = {
    {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS},
    {"EFBIG", EFBIG}, {"EBADF", EBADF}, {"EACCES", EACCES}, {"EPERM", EPERM},
    {"EINTR", EINTR}, {"EAGAIN", EAGAIN}, {"ENOMEM", ENOMEM}, {"EINVAL", EINVAL},
    {"ENXIO", ENXIO},
};

static int parse_errno(const char *s) {
    for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++)
        if (strcmp(s, ERRNOS[i].name) == 0) return ERRNOS[i].value;
    char *end;
    long n = strtol(s, &end, 10);
    return (*s != '\0' && *end == '\0' && n > 0) ? (int)n : EIO;
}

static unsigned parse_ops(char *s) {
    unsigned ops = 0;
    for (char *save = NULL, *op = strtok_r(s, ",", &save); op; op = strtok_r(NULL, ",", &save)) {
        if (strcmp(op, "write") == 0) ops |= OPS_WRITE;
        else if (strcmp(op, "read") == 0) ops |= OPS_READ;
        else if (strcmp(op, "sync") == 0 || strcmp(op, "fsync") == 0) ops |= OPS_SYNC;
        else if (strcmp(op, "truncate") == 0) ops |= OPS_TRUNCATE;
        /* The 32-bit-offset names stand for their 64-bit twins too (a program built
           with _FILE_OFFSET_BITS=64, Python among them, calls pwrite64 for pwrite). */
        else if (strcmp(op, "pwrite") == 0) ops |= BIT(F_PWRITE) | BIT(F_PWRITE64);
        else if (strcmp(op, "pread") == 0) ops |= BIT(F_PREAD) | BIT(F_PREAD64);
        else if (strcmp(op, "pwritev") == 0) ops |= BIT(F_PWRITEV) | BIT(F_PWRITEV64);
        else if (strcmp(op, "preadv") == 0) ops |= BIT(F_PREADV) | BIT(F_PREADV64);
        else if (strcmp(op, "ftruncate") == 0) ops |= OPS_TRUNCATE;
        else
            for (int f = 0; f < F_COUNT; f++)
                if (strcmp(op, FN_NAMES[f]) == 0) ops |= BIT(f);
    }
    return ops;
}

static void parse_fault(char *fields) {
    if (ctl.nrules >= MAX_RULES) return;
    struct rule r;
    memset(&r, 0, sizeof r);
    r.err = EIO;
    r.count = -1;
    r.min_offset = -1;
    int have_path = 0;
    for (char *save = NULL, *f = strtok_r(fields, " \t", &save); f; f = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(f, '=');
        if (eq == NULL) continue;
        *eq = '\0';
        const char *value = eq + 1;
        if (strcmp(f, "op") == 0) {
            char ops[256];
            snprintf(ops, sizeof ops, "%s", value);
            r.ops = parse_ops(ops);
        } else if (strcmp(f, "path") == 0) {
            snprintf(r.pattern, sizeof r.pattern, "%s", value);
            r.pattern_len = strlen(r.pattern);
            if (r.pattern_len > 0 && r.pattern[r.pattern_len - 1] == '$') {
                r.anchored = 1;
                r.pattern[--r.pattern_len] = '\0';
            }
            have_path = 1;
        } else if (strcmp(f, "errno") == 0) {
            r.err = parse_errno(value);
        } else if (strcmp(f, "after") == 0) {
            r.after = strtoll(value, NULL, 10);
        } else if (strcmp(f, "count") == 0) {
            r.count = strtoll(value, NULL, 10);
        } else if (strcmp(f, "min_offset") == 0) {
            r.min_offset = strtoll(value, NULL, 10);
        } else if (strcmp(f, "action") == 0) {
            r.flip = strcmp(value, "flip") == 0;
        }
    }
    if (r.flip) r.ops &= OPS_READ;
    if (r.ops != 0 && have_path) ctl.rules[ctl.nrules++] = r;
}

static void parse(void) {
    static char text[CTL_MAX]; /* static, like refresh()'s buffer: under `lock` */
    memcpy(text, ctl.text, ctl.len);
    text[ctl.len] = '\0';
    ctl.nrules = 0;
    ctl.clock_offset = 0.0;
    ctl.log[0] = '\0';
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *hash = strchr(line, '#');
        if (hash != NULL) *hash = '\0';
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (strncmp(line, "fault ", 6) == 0 || strncmp(line, "fault\t", 6) == 0) {
            parse_fault(line + 6);
        } else if (strncmp(line, "clock_offset=", 13) == 0) {
            ctl.clock_offset = strtod(line + 13, NULL);
        } else if (strncmp(line, "log=", 4) == 0) {
            snprintf(ctl.log, sizeof ctl.log, "%s", line + 4);
        }
    }
}

/* Bring `ctl` up to date with the file.  Called with `lock` held and `busy` set. */
static void refresh(void) {
    static const char *path;
    static int have_path = -1;
    if (have_path < 0) {
        path = getenv("SQLQ_FAULT_CTL");
        have_path = path != NULL && path[0] != '\0';
    }
    static char buf[CTL_MAX]; /* not on the stack: threads may have small ones */
    size_t len = 0;
    int fd = have_path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        ssize_t got;
        while (len < sizeof buf - 1 &&
               (got = real.read(fd, buf + len, sizeof buf - 1 - len)) != 0) {
            if (got < 0) {
                if (errno == EINTR) continue;
                break;
            }
            len += (size_t)got;
        }
        close(fd);
    }
    if (ctl.loaded && len == ctl.len && memcmp(buf, ctl.text, len) == 0) return;
    memcpy(ctl.text, buf, len);
    ctl.len = len;
    ctl.loaded = 1;
    parse(); /* new contents: new rules, counters from zero */
}

static int path_matches(const struct rule *r, const char *path, size_t len) {
    if (r->pattern_len == 0) return 1;
    if (r->anchored)
        return len >= r->pattern_len &&
               memcmp(path + len - r->pattern_len, r->pattern, r->pattern_len) == 0;
    return strstr(path, r->pattern) != NULL;
}

static void log_fault(const char *func, int fd, const char *path, int index, const struct rule *r) {
    if (ctl.log[0] == '\0') return;
    char line[PATH_MAX + 128];
    int n = r->flip
        ? snprintf(line, sizeof line, "%s fd=%d %s rule=%d flip\n", func, fd, path, index)
        : snprintf(line, sizeof line, "%s fd=%d %s rule=%d errno=%d\n", func, fd, path, index,
                   r->err);
    if (n <= 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    int out = open(ctl.log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (out < 0) return;
    ssize_t ignored = real.write(out, line, (size_t)n);
    (void)ignored;
    close(out);
}

enum verdict { PASS, FAIL, FLIP };

/* What to do with a call of `f` on `fd` (at `offset`, or -1 for none). */
static enum verdict decide(enum fn f, int fd, long long offset, int *err) {
    RESOLVE();
    if (busy) return PASS;
    busy = 1;
    int saved = errno;
    enum verdict verdict = PASS;
    pthread_mutex_lock(&lock);
    refresh();
    unsigned wanted = 0;
    for (int i = 0; i < ctl.nrules; i++) wanted |= ctl.rules[i].ops;
    if (wanted & BIT(f)) {
        char link[64], path[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        if (n >= 0) {
            path[n] = '\0';
            for (int i = 0; i < ctl.nrules; i++) {
                struct rule *r = &ctl.rules[i];
                if (!(r->ops & BIT(f)) || !path_matches(r, path, (size_t)n)) continue;
                if (r->min_offset >= 0 && (offset < 0 || offset < r->min_offset)) continue;
                r->seen++;
                if (r->seen <= r->after || (r->count >= 0 && r->acted >= r->count)) continue;
                r->acted++;
                verdict = r->flip ? FLIP : FAIL;
                *err = r->err;
                log_fault(FN_NAMES[f], fd, path, i, r);
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    busy = 0;
    return verdict;
}

static void flip_bytes(void *buf, ssize_t n) {
    unsigned char *p = buf;
    for (ssize_t i = 0; i < n; i++) p[i] = (unsigned char)~p[i];
}

static void flip_iov(const struct iovec *iov, int iovcnt, ssize_t n) {
    for (int i = 0; i < iovcnt && n > 0; i++) {
        ssize_t part = (size_t)n < iov[i].iov_len ? n : (ssize_t)iov[i].iov_len;
        flip_bytes(iov[i].iov_base, part);
        n -= part;
    }
}

/* --- writes --------------------------------------------------------------- */

#define FAIL_WITH(err) \
    do {               \
        errno = (err); \
        return -1;     \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    int err;
    if (decide(F_WRITE, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
    int err;
    if (decide(F_PWRITE, fd, (long long)offset, &err) == FAIL) FAIL_WITH(err);
    return real.pwrite(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t offset) {
    int err;
    if (decide(F_PWRITE64, fd, (long long)offset, &err) == FAIL) FAIL_WITH(err);
    return real.pwrite64(fd, buf, n, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    int err;
    if (decide(F_WRITEV, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    int err;
    if (decide(F_PWRITEV, fd, (long long)offset, &err) == FAIL) FAIL_WITH(err);
    return real.pwritev(fd, iov, iovcnt, offset);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off64_t offset) {
    int err;
    if (decide(F_PWRITEV64, fd, (long long)offset, &err) == FAIL) FAIL_WITH(err);
    return real.pwritev64(fd, iov, iovcnt, offset);
}

/* --- reads ---------------------------------------------------------------- */

ssize_t read(int fd, void *buf, size_t n) {
    int err;
    enum verdict v = decide(F_READ, fd, -1, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.read(fd, buf, n);
    if (v == FLIP && got > 0) flip_bytes(buf, got);
    return got;
}

ssize_t pread(int fd, void *buf, size_t n, off_t offset) {
    int err;
    enum verdict v = decide(F_PREAD, fd, (long long)offset, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.pread(fd, buf, n, offset);
    if (v == FLIP && got > 0) flip_bytes(buf, got);
    return got;
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t offset) {
    int err;
    enum verdict v = decide(F_PREAD64, fd, (long long)offset, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.pread64(fd, buf, n, offset);
    if (v == FLIP && got > 0) flip_bytes(buf, got);
    return got;
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt) {
    int err;
    enum verdict v = decide(F_READV, fd, -1, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.readv(fd, iov, iovcnt);
    if (v == FLIP && got > 0) flip_iov(iov, iovcnt, got);
    return got;
}

ssize_t preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    int err;
    enum verdict v = decide(F_PREADV, fd, (long long)offset, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.preadv(fd, iov, iovcnt, offset);
    if (v == FLIP && got > 0) flip_iov(iov, iovcnt, got);
    return got;
}

ssize_t preadv64(int fd, const struct iovec *iov, int iovcnt, off64_t offset) {
    int err;
    enum verdict v = decide(F_PREADV64, fd, (long long)offset, &err);
    if (v == FAIL) FAIL_WITH(err);
    ssize_t got = real.preadv64(fd, iov, iovcnt, offset);
    if (v == FLIP && got > 0) flip_iov(iov, iovcnt, got);
    return got;
}

/* --- syncs and truncation ------------------------------------------------- */

int fsync(int fd) {
    int err;
    if (decide(F_FSYNC, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.fsync(fd);
}

int fdatasync(int fd) {
    int err;
    if (decide(F_FDATASYNC, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.fdatasync(fd);
}

int ftruncate(int fd, off_t length) {
    int err;
    if (decide(F_FTRUNCATE, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.ftruncate(fd, length);
}

int ftruncate64(int fd, off64_t length) {
    int err;
    if (decide(F_FTRUNCATE64, fd, -1, &err) == FAIL) FAIL_WITH(err);
    return real.ftruncate64(fd, length);
}

/* --- the wall clock ------------------------------------------------------- */

/* The clock offset in nanoseconds (0 without a control file). */
static long long clock_offset_ns(void) {
    RESOLVE();
    if (busy) return 0;
    busy = 1;
    int saved = errno;
    pthread_mutex_lock(&lock);
    refresh();
    double offset = ctl.clock_offset;
    pthread_mutex_unlock(&lock);
    errno = saved;
    busy = 0;
    return (long long)(offset * 1e9 + (offset >= 0 ? 0.5 : -0.5));
}

static void shift(struct timespec *ts, long long offset_ns) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
    long long sec = ns / 1000000000LL, rest = ns % 1000000000LL;
    if (rest < 0) {
        rest += 1000000000LL;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rest;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    RESOLVE();
    int rc = real.clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long offset = clock_offset_ns();
        if (offset != 0) shift(ts, offset);
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    RESOLVE();
    struct timespec ts;
    int rc = real.clock_gettime(CLOCK_REALTIME, &ts);
    if (rc != 0) return rc;
    long long offset = clock_offset_ns();
    if (offset != 0) shift(&ts, offset);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    if (tz != NULL) memset(tz, 0, sizeof(struct timezone));
    return 0;
}

time_t time(time_t *out) {
    RESOLVE();
    struct timespec ts;
    if (real.clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    long long offset = clock_offset_ns();
    if (offset != 0) shift(&ts, offset);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
