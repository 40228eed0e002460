/*
 * corral guest agent: runs inside a Corral VM as PID 1 (after the initramfs switched root)
 * and serves the host over one virtio-serial port. Protocol: docs/vm-guest-protocol.md.
 *
 * One thread, one poll() loop: the port, a signalfd for SIGCHLD, and the pipes of every
 * running command. Requests are multiplexed by id, so many commands and file transfers
 * run at once. As PID 1 it also reaps every orphan.
 *
 * Build: gcc -static -O2 -o corral-agent agent.c -ljansson
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PROTOCOL_VERSION
#define PROTOCOL_VERSION 1 /* the build passes protocol.PROTOCOL_VERSION */
#endif
#define MAX_FRAME (4u << 20)            /* bigger frames are a framing error */
#define MARKER_LEN 8                    /* 8 x 0xFF: never inside a valid stream */
#define OUTQ_HIGH (1u << 20)            /* stop reading pipes/files above this */
#define READ_CHUNK (64u << 10)
#define DRAIN_GRACE_S 0.2               /* after exit, wait this long for pipe EOF */
#define USER_UID 1000
#define USER_GID 1000
#define HOME "/home/user"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DISCONNECTED_POLL_MS 50
/* Commands (exec and the display's shell) run in this memory cgroup, capped below what the
 * guest had free at start by COMMANDS_RESERVE_KB: a memory bomb meets the cgroup's OOM
 * killer while the kernel and the agent still have room. */
#define CGROUP_ROOT "/sys/fs/cgroup"
#define COMMANDS_CGROUP CGROUP_ROOT "/commands"
#define COMMANDS_RESERVE_KB (8L << 10)

extern char **environ;

enum kind { K_EXEC, K_READ, K_WRITE };

struct stream {
    int fd;
    size_t kept;
};

struct req {
    long long id;
    enum kind kind;
    struct req *next;
    /* exec */
    pid_t pid;
    struct stream out, err;
    int in_fd;
    unsigned char *in_buf;
    size_t in_len, in_off;
    size_t limit;
    bool truncated, exited, timed_out;
    int status;
    double t0, deadline, grace_deadline;
    long oom_before;
    /* read / write */
    int fd, dir_fd;
    char name[256];
    long long bytes;
    /* read: bytes the host still accepts (-1: no limit); it grants more with read_ack */
    long long credit;
};

static int port_fd = -1;
static bool connected = true;
static char port_path[300];
static struct req *reqs;
static const char *tty_path;
static pid_t tty_pid = -1;
static double tty_last_spawn = -10;
/* cgroup.procs of COMMANDS_CGROUP (-1: no cgroup, commands share the agent's) */
static int commands_procs_fd = -1;

/* outgoing bytes not yet written to the port */
static unsigned char *outq;
static size_t outq_len, outq_cap;
/* incoming bytes not yet parsed */
static unsigned char *inq;
static size_t inq_len, inq_cap;
static int ff_run;        /* consecutive 0xFF bytes seen: MARKER_LEN of them = resync */
static bool desynced;     /* framing error: ignore input until the next marker */

static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("corral-agent: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        logf_("out of memory");
        abort();
    }
    return q;
}

static void buf_append(unsigned char **buf, size_t *len, size_t *cap, const void *data, size_t n) {
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 65536;
        while (c < *len + n)
            c *= 2;
        *buf = xrealloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
}

/* ---- base64 ------------------------------------------------------------------------ */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *src, size_t n, size_t *out_len) {
    size_t len = 4 * ((n + 2) / 3);
    char *out = xrealloc(NULL, len + 1), *p = out;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        *p++ = B64[v >> 18];
        *p++ = B64[(v >> 12) & 63];
        *p++ = B64[(v >> 6) & 63];
        *p++ = B64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < n ? (uint32_t)src[i + 1] << 8 : 0);
        *p++ = B64[v >> 18];
        *p++ = B64[(v >> 12) & 63];
        *p++ = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    *p = 0;
    *out_len = len;
    return out;
}

/* 0..63 for base64 digits, 64 for '=', 255 for anything else */
static unsigned char b64_rev[256];

static void b64_init(void) {
    memset(b64_rev, 255, sizeof b64_rev);
    for (int i = 0; i < 64; i++)
        b64_rev[(unsigned char)B64[i]] = (unsigned char)i;
    b64_rev['='] = 64;
}

/* Returns a malloc'd buffer (NULL on invalid input). Four digits at a time: file uploads
 * go through here, and every instruction counts under TCG. */
static unsigned char *b64_decode(const char *src, size_t n, size_t *out_len) {
    if (n % 4)
        return NULL;
    unsigned char *out = xrealloc(NULL, n / 4 * 3 + 1);
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned a = b64_rev[s[i]], b = b64_rev[s[i + 1]], c = b64_rev[s[i + 2]], d = b64_rev[s[i + 3]];
        if ((a | b | c | d) < 64) {
            uint32_t v = a << 18 | b << 12 | c << 6 | d;
            out[o++] = (unsigned char)(v >> 16);
            out[o++] = (unsigned char)(v >> 8);
            out[o++] = (unsigned char)v;
            continue;
        }
        /* padding, only in the last group: "xx==" or "xxx=" */
        if (i + 4 != n || a > 63 || b > 63 || c == 255 || d != 64 || (c == 64 && d != 64)) {
            free(out);
            return NULL;
        }
        uint32_t v = a << 18 | b << 12 | (c < 64 ? c << 6 : 0);
        out[o++] = (unsigned char)(v >> 16);
        if (c < 64)
            out[o++] = (unsigned char)(v >> 8);
    }
    *out_len = o;
    return out;
}

/* ---- outgoing frames --------------------------------------------------------------- */

static void send_marker(void) {
    static const unsigned char m[MARKER_LEN] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    buf_append(&outq, &outq_len, &outq_cap, m, MARKER_LEN);
}

/* Queues obj as one frame and releases it. */
static void send_frame(json_t *obj) {
    char *text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!text) {
        logf_("cannot encode a reply");
        return;
    }
    size_t n = strlen(text);
    unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                            (unsigned char)n};
    buf_append(&outq, &outq_len, &outq_cap, hdr, 4);
    buf_append(&outq, &outq_len, &outq_cap, text, n);
    free(text);
}

static json_t *reply(long long id, const char *type) {
    return json_pack("{s:I,s:s}", "id", (json_int_t)id, "type", type);
}

static void send_ok(long long id) { send_frame(reply(id, "ok")); }

/* `at`: how many path components the failing path has (-1: not about a path). */
static void send_error(long long id, int err, int at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = reply(id, "error");
    json_object_set_new(o, "errno", json_integer(err));
    json_object_set_new(o, "message", json_string(msg));
    if (at >= 0)
        json_object_set_new(o, "at", json_integer(at));
    send_frame(o);
}

/* Bulk data (output, file chunks) is written without jansson: base64 needs no JSON
 * escaping, and jansson's per-character work is most of the agent's CPU under TCG. */
static void send_data(long long id, const char *type, const unsigned char *data, size_t n) {
    size_t len;
    char *enc = b64_encode(data, n, &len);
    char head[96];
    int hn = snprintf(head, sizeof head, "{\"id\":%lld,\"type\":\"%s\",\"data\":\"", id, type);
    size_t total = (size_t)hn + len + 2;
    unsigned char hdr[4] = {(unsigned char)(total >> 24), (unsigned char)(total >> 16),
                            (unsigned char)(total >> 8), (unsigned char)total};
    buf_append(&outq, &outq_len, &outq_cap, hdr, 4);
    buf_append(&outq, &outq_len, &outq_cap, head, (size_t)hn);
    buf_append(&outq, &outq_len, &outq_cap, enc, len);
    buf_append(&outq, &outq_len, &outq_cap, "\"}", 2);
    free(enc);
}

static void flush_out(void) {
    if (!connected || outq_len == 0)
        return;
    size_t off = 0;
    while (off < outq_len) {
        ssize_t w = write(port_fd, outq + off, outq_len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        break; /* EAGAIN (host slow or gone): POLLOUT tells us when to go on */
    }
    memmove(outq, outq + off, outq_len - off);
    outq_len -= off;
}

/* ---- requests ------------------------------------------------------------------------ */

static struct req *find_req(long long id) {
    for (struct req *r = reqs; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static bool req_alive(const struct req *r) {
    for (struct req *q = reqs; q; q = q->next)
        if (q == r)
            return true;
    return false;
}

static void close_fd(int *fd) {
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void unlink_req(struct req *r) {
    for (struct req **p = &reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
}

/* SIGKILLs a command and its process group. The pid too: right after fork() the child may
 * not have reached setsid() yet (one vCPU: the parent runs on), so no group exists. */
static void kill_command(pid_t pid) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

/* Frees r and everything it holds; a still-running command's process group is killed. */
static void drop_req(struct req *r, bool unlink_upload) {
    unlink_req(r);
    if (r->kind == K_EXEC) {
        if (!r->exited && r->pid > 0)
            kill_command(r->pid);
        close_fd(&r->out.fd);
        close_fd(&r->err.fd);
        close_fd(&r->in_fd);
        free(r->in_buf);
    } else {
        close_fd(&r->fd);
        if (r->kind == K_WRITE && unlink_upload && r->dir_fd >= 0)
            unlinkat(r->dir_fd, r->name, 0);
        close_fd(&r->dir_fd);
    }
    free(r);
}

static struct req *new_req(long long id, enum kind kind) {
    struct req *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->id = id;
    r->kind = kind;
    r->out.fd = r->err.fd = r->in_fd = r->fd = r->dir_fd = -1;
    r->next = reqs;
    reqs = r;
    return r;
}

/* A new host session began (it sent a marker): everything of the old one is stale. */
static void resync(void) {
    int dropped = 0;
    for (; reqs; dropped++)
        drop_req(reqs, true);
    if (dropped)
        logf_("new host session: ended %d request(s) of the previous one", dropped);
    outq_len = 0;
    inq_len = 0;
    desynced = false;
    send_marker();
}

/* ---- paths ------------------------------------------------------------------------------
 * The host sends paths as a list of components below "/", already checked (no "..", no
 * empty or "." components). Each directory is opened relative to its parent with
 * O_NOFOLLOW, the same walk the container backend does host-side.
 */

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct path {
    const char *parts[512];
    size_t n;
};

static bool parse_path(json_t *req, struct path *p) {
    json_t *arr = json_object_get(req, "parts");
    if (!json_is_array(arr) || json_array_size(arr) > 512)
        return false;
    p->n = json_array_size(arr);
    for (size_t i = 0; i < p->n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
            return false;
        p->parts[i] = s;
    }
    return true;
}

/* Opens the directory holding parts[n-1] (the root when n == 0). On failure returns -1
 * with errno set and *at = number of components of the path that failed. */
static int open_parent(const struct path *p, bool create, int *at) {
    int fd = open("/", DIR_FLAGS);
    if (fd < 0) {
        *at = 0;
        return -1;
    }
    for (size_t i = 0; i + 1 < p->n; i++) {
        int nfd = openat(fd, p->parts[i], DIR_FLAGS);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, p->parts[i], 0755) == 0)
                fchownat(fd, p->parts[i], USER_UID, USER_GID, AT_SYMLINK_NOFOLLOW);
            nfd = openat(fd, p->parts[i], DIR_FLAGS);
        }
        if (nfd < 0) {
            int e = errno;
            close(fd);
            errno = e;
            *at = (int)i + 1;
            return -1;
        }
        close(fd);
        fd = nfd;
    }
    return fd;
}

static const char *file_type(mode_t m) {
    if (S_ISREG(m)) return "file";
    if (S_ISDIR(m)) return "dir";
    if (S_ISLNK(m)) return "symlink";
    return "other";
}

static json_t *stat_json(const struct stat *st) {
    return json_pack("{s:s,s:I,s:i,s:f}", "type", file_type(st->st_mode), "size", (json_int_t)st->st_size,
                     "mode", (int)(st->st_mode & 07777),
                     "mtime", (double)st->st_mtim.tv_sec + st->st_mtim.tv_nsec / 1e9);
}

static void op_stat(long long id, json_t *req) {
    struct path p;
    if (!parse_path(req, &p)) {
        send_error(id, EINVAL, -1, "bad path");
        return;
    }
    struct stat st;
    int at = 0;
    if (p.n == 0) {
        if (lstat("/", &st) < 0) {
            send_error(id, errno, 0, "%s", strerror(errno));
            return;
        }
    } else {
        int dfd = open_parent(&p, false, &at);
        if (dfd < 0) {
            send_error(id, errno, at, "%s", strerror(errno));
            return;
        }
        int rc = fstatat(dfd, p.parts[p.n - 1], &st, AT_SYMLINK_NOFOLLOW);
        int e = errno;
        close(dfd);
        if (rc < 0) {
            send_error(id, e, (int)p.n, "%s", strerror(e));
            return;
        }
    }
    json_t *o = reply(id, "ok");
    json_object_set_new(o, "info", stat_json(&st));
    send_frame(o);
}

static void op_list(long long id, json_t *req) {
    struct path p;
    if (!parse_path(req, &p) || p.n >= 512) {
        send_error(id, EINVAL, -1, "bad path");
        return;
    }
    p.parts[p.n++] = "."; /* walk (and vet) every real component as a directory */
    int at = 0;
    int dfd = open_parent(&p, false, &at);
    if (dfd < 0) {
        send_error(id, errno, at, "%s", strerror(errno));
        return;
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        send_error(id, e, (int)p.n - 1, "%s", strerror(e));
        return;
    }
    json_t *entries = json_array();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        json_t *e = stat_json(&st);
        json_object_set_new(e, "name", json_string(de->d_name));
        json_array_append_new(entries, e);
    }
    closedir(d);
    json_t *o = reply(id, "ok");
    json_object_set_new(o, "entries", entries);
    send_frame(o);
}

static void op_read(long long id, json_t *req) {
    struct path p;
    if (!parse_path(req, &p)) {
        send_error(id, EINVAL, -1, "bad path");
        return;
    }
    if (p.n == 0) {
        send_error(id, EISDIR, 0, "is a directory");
        return;
    }
    int at = 0;
    int dfd = open_parent(&p, false, &at);
    if (dfd < 0) {
        send_error(id, errno, at, "%s", strerror(errno));
        return;
    }
    int fd = openat(dfd, p.parts[p.n - 1], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int e = errno;
    close(dfd);
    if (fd < 0) {
        send_error(id, e, (int)p.n, "%s", strerror(e));
        return;
    }
    struct stat st;
    fstat(fd, &st);
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        e = S_ISDIR(st.st_mode) ? EISDIR : ENXIO;
        send_error(id, e, (int)p.n, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        return;
    }
    fcntl(fd, F_SETFL, O_RDONLY);
    struct req *r = new_req(id, K_READ);
    r->fd = fd;
    json_t *window = json_object_get(req, "window");
    r->credit = json_is_integer(window) ? json_integer_value(window) : -1;
    json_t *o = reply(id, "open");
    json_object_set_new(o, "size", json_integer(st.st_size));
    send_frame(o);
}

/* Sends the next chunk of every file being read, as long as the host keeps up. */
static bool pump_reads(void) {
    bool more = false;
    struct req *r = reqs, *next;
    static unsigned char buf[READ_CHUNK];
    for (; r; r = next) {
        next = r->next;
        if (r->kind != K_READ || r->credit == 0)
            continue;
        if (outq_len >= OUTQ_HIGH) {
            more = false;
            break;
        }
        size_t want = sizeof buf;
        if (r->credit > 0 && (long long)want > r->credit)
            want = (size_t)r->credit;
        ssize_t n = read(r->fd, buf, want);
        if (n > 0) {
            r->bytes += n;
            if (r->credit > 0)
                r->credit -= n;
            send_data(r->id, "data", buf, (size_t)n);
            more = true;
        } else if (n == 0) {
            json_t *o = reply(r->id, "ok");
            json_object_set_new(o, "size", json_integer(r->bytes));
            send_frame(o);
            drop_req(r, false);
        } else if (errno != EINTR) {
            send_error(r->id, errno, -1, "read: %s", strerror(errno));
            drop_req(r, false);
        }
    }
    return more;
}

static void op_write_open(long long id, json_t *req) {
    struct path p;
    if (!parse_path(req, &p)) {
        send_error(id, EINVAL, -1, "bad path");
        return;
    }
    if (p.n == 0) {
        send_error(id, EISDIR, 0, "is a directory");
        return;
    }
    if (find_req(id)) {
        send_error(id, EINVAL, -1, "request id %lld is in use", id);
        return;
    }
    mode_t mode = (mode_t)json_integer_value(json_object_get(req, "mode")) & 0777;
    int at = 0;
    int dfd = open_parent(&p, true, &at);
    if (dfd < 0) {
        send_error(id, errno, at, "%s", strerror(errno));
        return;
    }
    const char *name = p.parts[p.n - 1];
    int flags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = openat(dfd, name, flags | O_CREAT | O_EXCL, mode);
    if (fd >= 0) {
        fchown(fd, USER_UID, USER_GID);
    } else if (errno == EEXIST) {
        fd = openat(dfd, name, flags);
        if (fd >= 0) {
            struct stat st;
            fstat(fd, &st);
            if (!S_ISREG(st.st_mode)) {
                close(fd);
                close(dfd);
                send_error(id, ENXIO, (int)p.n, "not a regular file");
                return;
            }
            ftruncate(fd, 0);
        }
    }
    if (fd < 0) {
        int e = errno;
        close(dfd);
        send_error(id, e, (int)p.n, "%s", strerror(e));
        return;
    }
    fchmod(fd, mode);
    fcntl(fd, F_SETFL, O_WRONLY);
    struct req *r = new_req(id, K_WRITE);
    r->fd = fd;
    r->dir_fd = dfd;
    snprintf(r->name, sizeof r->name, "%s", name);
}

static void write_data(long long id, const char *b64, size_t b64_len) {
    struct req *r = find_req(id);
    if (!r || r->kind != K_WRITE)
        return; /* the upload already failed (and was answered) */
    size_t n = 0;
    unsigned char *data = b64 ? b64_decode(b64, b64_len, &n) : NULL;
    if (!data) {
        send_error(id, EINVAL, -1, "data is not base64");
        drop_req(r, true);
        return;
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(r->fd, data + off, n - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            send_error(id, errno, -1, "write: %s", strerror(errno));
            drop_req(r, true);
            free(data);
            return;
        }
        off += (size_t)w;
    }
    r->bytes += (long long)n;
    free(data);
}

static void op_write_close(long long id, bool abort_upload) {
    struct req *r = find_req(id);
    if (!r || r->kind != K_WRITE)
        return;
    if (abort_upload) {
        drop_req(r, true);
        return;
    }
    long long n = r->bytes;
    drop_req(r, false);
    json_t *o = reply(id, "ok");
    json_object_set_new(o, "size", json_integer(n));
    send_frame(o);
}

/* ---- exec ------------------------------------------------------------------------------ */

/* "<key> <n>" lines (/proc/vmstat, memory.events): n of the line for key, 0 if absent. */
static long stat_value(const char *path, const char *key) {
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[128];
    size_t len = strlen(key);
    long n = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, len) && line[len] == ' ')
            n = atol(line + len + 1);
    fclose(f);
    return n;
}

/* OOM kills of commands so far: the commands cgroup's count (kills by its own limit and by
 * the guest-wide OOM killer alike), else the guest's. */
static long oom_kills(void) {
    if (commands_procs_fd >= 0)
        return stat_value(COMMANDS_CGROUP "/memory.events", "oom_kill");
    return stat_value("/proc/vmstat", "oom_kill");
}

static bool write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return ok;
}

/* A memory bomb must end as an OOM kill of the command, not of the guest: the agent's pages
 * stay resident (no refaulting its text from disk while commands thrash), and commands get
 * a memory cgroup that leaves the kernel and the agent a reserve. As PID 1 the agent is
 * never an OOM victim itself (the kernel skips the global init). Any step that fails leaves
 * the guest as it was before (commands in the root cgroup, counted by /proc/vmstat). */
static void guard_memory(void) {
    if (mlockall(MCL_CURRENT | MCL_FUTURE) < 0)
        logf_("mlockall: %s", strerror(errno));
    if (mount("cgroup2", CGROUP_ROOT, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 && errno != EBUSY) {
        logf_("cannot mount cgroup2 on " CGROUP_ROOT ": %s", strerror(errno));
        return;
    }
    if (!write_text(CGROUP_ROOT "/cgroup.subtree_control", "+memory") ||
        (mkdir(COMMANDS_CGROUP, 0755) < 0 && errno != EEXIST)) {
        logf_("no memory cgroup for commands: %s", strerror(errno));
        return;
    }
    long avail_kb = stat_value("/proc/meminfo", "MemAvailable:");
    if (avail_kb > 2 * COMMANDS_RESERVE_KB) {
        char max[32];
        snprintf(max, sizeof max, "%ld", (avail_kb - COMMANDS_RESERVE_KB) << 10);
        if (!write_text(COMMANDS_CGROUP "/memory.max", max))
            logf_("cannot cap the commands' memory at %s: %s", max, strerror(errno));
    }
    commands_procs_fd = open(COMMANDS_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (commands_procs_fd < 0)
        logf_("cannot open " COMMANDS_CGROUP "/cgroup.procs: %s", strerror(errno));
}

/* In a child before exec: into the commands cgroup (its fd is closed by close_range after). */
static void join_commands_cgroup(void) {
    if (commands_procs_fd >= 0 && write(commands_procs_fd, "0", 1) < 0)
        dprintf(2, "corral-agent: cannot join the commands cgroup: %s\n", strerror(errno));
}

static void child_fail(const char *what, const char *arg) {
    dprintf(2, "%s %s: %s\n", what, arg, strerror(errno));
}

static void op_exec(long long id, json_t *req) {
    json_t *jargv = json_object_get(req, "argv");
    size_t argc = json_array_size(jargv);
    if (!json_is_array(jargv) || argc == 0) {
        send_error(id, EINVAL, -1, "argv must be a non-empty list");
        return;
    }
    if (find_req(id)) {
        send_error(id, EINVAL, -1, "request id %lld is in use", id);
        return;
    }
    char **argv = calloc(argc + 1, sizeof *argv);
    for (size_t i = 0; i < argc; i++) {
        argv[i] = (char *)json_string_value(json_array_get(jargv, i));
        if (!argv[i]) {
            free(argv);
            send_error(id, EINVAL, -1, "argv must be strings");
            return;
        }
    }
    /* environment: defaults, then the request's (which override) */
    json_t *jenv = json_object_get(req, "env");
    json_t *env = json_pack("{s:s,s:s}", "PATH", DEFAULT_PATH, "HOME", HOME);
    if (json_is_object(jenv))
        json_object_update(env, jenv);
    size_t envc = json_object_size(env), k = 0;
    char **envp = calloc(envc + 1, sizeof *envp);
    const char *key;
    json_t *val;
    json_object_foreach(env, key, val) {
        const char *v = json_string_value(val);
        if (!v || !*key || strchr(key, '='))
            continue;
        if (asprintf(&envp[k], "%s=%s", key, v) > 0)
            k++;
    }
    const char *jcwd = json_string_value(json_object_get(req, "cwd"));
    char cwd[4200];
    if (jcwd && *jcwd == '/')
        snprintf(cwd, sizeof cwd, "%s", jcwd);
    else if (jcwd && *jcwd)
        snprintf(cwd, sizeof cwd, "%s/%s", HOME, jcwd);
    else
        snprintf(cwd, sizeof cwd, "%s", access(HOME, X_OK) == 0 ? HOME : "/tmp");
    bool as_root = json_is_string(json_object_get(req, "user")) &&
                   !strcmp(json_string_value(json_object_get(req, "user")), "root");
    json_t *jstdin = json_object_get(req, "stdin");

    struct req *r = new_req(id, K_EXEC);
    r->limit = (size_t)json_integer_value(json_object_get(req, "output_limit"));
    if (r->limit == 0)
        r->limit = 1 << 20;
    double timeout = json_number_value(json_object_get(req, "timeout_s"));
    if (timeout <= 0)
        timeout = 60;
    if (json_is_string(jstdin)) {
        r->in_buf = b64_decode(json_string_value(jstdin), json_string_length(jstdin), &r->in_len);
        if (!r->in_buf) {
            drop_req(r, false);
            send_error(id, EINVAL, -1, "stdin is not base64");
            goto out;
        }
    }
    int out_p[2], err_p[2], in_p[2] = {-1, -1};
    if (pipe2(out_p, O_CLOEXEC) < 0) {
        drop_req(r, false);
        send_error(id, errno, -1, "pipe: %s", strerror(errno));
        goto out;
    }
    if (pipe2(err_p, O_CLOEXEC) < 0 || (r->in_buf && pipe2(in_p, O_CLOEXEC) < 0)) {
        int e = errno;
        close(out_p[0]);
        close(out_p[1]);
        drop_req(r, false);
        send_error(id, e, -1, "pipe: %s", strerror(e));
        goto out;
    }
    r->oom_before = oom_kills();
    r->t0 = now_s();
    r->deadline = r->t0 + timeout;
    pid_t pid = fork();
    if (pid == 0) {
        /* child: its own session (so a timeout kills the whole process group) */
        setsid();
        join_commands_cgroup();
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDWR);
        dup2(in_p[0] >= 0 ? in_p[0] : devnull, 0);
        dup2(out_p[1], 1);
        dup2(err_p[1], 2);
        syscall(SYS_close_range, 3, ~0U, 0);
        if (!as_root) {
            gid_t g = USER_GID;
            if (setgroups(1, &g) < 0 || setgid(USER_GID) < 0 || setuid(USER_UID) < 0) {
                child_fail("setuid", "1000");
                _exit(126);
            }
        }
        if (chdir(cwd) < 0) {
            child_fail("chdir to", cwd);
            _exit(1);
        }
        environ = envp;
        execvp(argv[0], argv);
        int e = errno;
        child_fail("exec", argv[0]);
        _exit(e == ENOENT ? 127 : 126);
    }
    close(out_p[1]);
    close(err_p[1]);
    if (in_p[0] >= 0)
        close(in_p[0]);
    r->out.fd = out_p[0];
    r->err.fd = err_p[0];
    r->in_fd = in_p[1];
    if (pid < 0) {
        int e = errno;
        drop_req(r, false);
        send_error(id, e, -1, "fork: %s", strerror(e));
        goto out;
    }
    r->pid = pid;
    fcntl(r->out.fd, F_SETFL, O_NONBLOCK);
    fcntl(r->err.fd, F_SETFL, O_NONBLOCK);
    if (r->in_fd >= 0) {
        fcntl(r->in_fd, F_SETFL, O_NONBLOCK);
        if (r->in_len == 0)
            close_fd(&r->in_fd);
    }
out:
    for (size_t i = 0; i < k; i++)
        free(envp[i]);
    free(envp);
    free(argv);
    json_decref(env);
}

static void exec_finish(struct req *r) {
    int code = -1;
    bool has_code = !r->timed_out;
    if (WIFEXITED(r->status))
        code = WEXITSTATUS(r->status);
    else if (WIFSIGNALED(r->status))
        code = 128 + WTERMSIG(r->status);
    json_t *o = reply(r->id, "exit");
    json_object_set_new(o, "exit_code", has_code ? json_integer(code) : json_null());
    json_object_set_new(o, "duration_ms", json_real((now_s() - r->t0) * 1000.0));
    json_object_set_new(o, "timed_out", json_boolean(r->timed_out));
    json_object_set_new(o, "truncated", json_boolean(r->truncated));
    json_object_set_new(o, "oom_killed", json_boolean(oom_kills() > r->oom_before));
    send_frame(o);
    drop_req(r, false);
}

/* Reads what a command wrote; past the cap our read end is closed, so the writer dies of
 * SIGPIPE instead of keeping the guest busy producing output nobody keeps. */
static void exec_read(struct req *r, struct stream *s, const char *name) {
    static unsigned char buf[65536];
    ssize_t n = read(s->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        close_fd(&s->fd);
        return;
    }
    size_t room = r->limit > s->kept ? r->limit - s->kept : 0;
    size_t keep = (size_t)n > room ? room : (size_t)n;
    if (keep)
        send_data(r->id, name, buf, keep);
    s->kept += keep;
    if ((size_t)n > room) {
        r->truncated = true;
        close_fd(&s->fd);
    }
}

static void exec_feed_stdin(struct req *r) {
    ssize_t w = write(r->in_fd, r->in_buf + r->in_off, r->in_len - r->in_off);
    if (w > 0)
        r->in_off += (size_t)w;
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
        r->in_off = r->in_len; /* EPIPE: the command does not read its input */
    if (r->in_off >= r->in_len)
        close_fd(&r->in_fd);
}

static void spawn_tty_shell(void) {
    tty_last_spawn = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        join_commands_cgroup();
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int fd = open(tty_path, O_RDWR); /* first tty opened by a session leader: controlling */
        if (fd < 0)
            _exit(1);
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        syscall(SYS_close_range, 3, ~0U, 0);
        gid_t g = USER_GID;
        if (setgroups(1, &g) < 0 || setgid(USER_GID) < 0 || setuid(USER_UID) < 0)
            _exit(1);
        if (chdir(HOME) < 0 && chdir("/") < 0)
            _exit(1);
        char *envp[] = {"PATH=" DEFAULT_PATH, "HOME=" HOME, "TERM=linux", "PS1=$ ", NULL};
        environ = envp;
        execl("/bin/sh", "sh", "-i", (char *)NULL);
        execl("/.corral/busybox", "sh", "-i", (char *)NULL);
        _exit(127);
    }
    tty_pid = pid;
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == tty_pid) {
            tty_pid = -1;
            continue;
        }
        for (struct req *r = reqs; r; r = r->next)
            if (r->kind == K_EXEC && r->pid == pid && !r->exited) {
                r->exited = true;
                r->status = status;
                r->grace_deadline = now_s() + DRAIN_GRACE_S;
                break;
            }
    }
}

/* ---- dispatch ---------------------------------------------------------------------- */

static void poweroff_now(void) {
    sync();
    reboot(RB_POWER_OFF);
    /* no power-off method: QEMU runs with -no-reboot, so a reboot ends it too */
    reboot(RB_AUTOBOOT);
    _exit(1);
}

static void handle_frame(json_t *req) {
    long long id = json_integer_value(json_object_get(req, "id"));
    const char *op = json_string_value(json_object_get(req, "op"));
    if (!op) {
        send_error(id, EINVAL, -1, "op is required");
        return;
    }
    if (!strcmp(op, "hello")) {
        json_t *o = reply(id, "ok");
        json_object_set_new(o, "version", json_integer(PROTOCOL_VERSION));
        json_object_set_new(o, "agent", json_string("corral-guest-agent"));
        json_t *session = json_object_get(req, "session");
        if (session)
            json_object_set(o, "session", session);
        struct timespec ts;
        clock_gettime(CLOCK_BOOTTIME, &ts);
        json_object_set_new(o, "uptime_s", json_real(ts.tv_sec + ts.tv_nsec / 1e9));
        send_frame(o);
    } else if (!strcmp(op, "ping")) {
        send_ok(id);
    } else if (!strcmp(op, "exec")) {
        op_exec(id, req);
    } else if (!strcmp(op, "stat")) {
        op_stat(id, req);
    } else if (!strcmp(op, "list")) {
        op_list(id, req);
    } else if (!strcmp(op, "read")) {
        op_read(id, req);
    } else if (!strcmp(op, "write_open")) {
        op_write_open(id, req);
    } else if (!strcmp(op, "write_data")) {
        json_t *js = json_object_get(req, "data");
        write_data(id, json_string_value(js), json_string_length(js));
    } else if (!strcmp(op, "write_close")) {
        op_write_close(id, false);
    } else if (!strcmp(op, "write_abort")) {
        op_write_close(id, true);
    } else if (!strcmp(op, "read_ack")) {
        /* the host consumed data of a read: it may have that much more */
        struct req *r = find_req(json_integer_value(json_object_get(req, "target")));
        long long n = json_integer_value(json_object_get(req, "bytes"));
        if (r && r->kind == K_READ && r->credit >= 0 && n > 0)
            r->credit += n;
    } else if (!strcmp(op, "cancel")) {
        /* The target ends silently: the host has stopped waiting for it. */
        struct req *r = find_req(json_integer_value(json_object_get(req, "target")));
        if (r)
            drop_req(r, true);
        send_ok(id);
    } else if (!strcmp(op, "shutdown")) {
        send_ok(id);
        /* the answer should be out before power-off, but a host that left gets 1 s at most */
        double until = now_s() + 1;
        while (outq_len && connected && now_s() < until) {
            struct pollfd p = {port_fd, POLLOUT, 0};
            if (poll(&p, 1, 100) > 0 && (p.revents & POLLHUP))
                break;
            flush_out();
        }
        poweroff_now();
    } else {
        send_error(id, ENOSYS, -1, "unknown op %s", op);
    }
}

/* Upload chunks, the bulk of host->guest bytes, skip jansson when they are exactly what
 * the host client writes: {"id":<n>,"op":"write_data","data":"<base64>"}. Anything else
 * (other key order, escapes) takes the general path. */
static bool fast_write_data(const char *f, size_t len) {
    static const char pre[] = "{\"id\":", mid[] = ",\"op\":\"write_data\",\"data\":\"";
    if (len < sizeof pre + sizeof mid || memcmp(f, pre, sizeof pre - 1) || f[len - 1] != '}' || f[len - 2] != '"')
        return false;
    const char *p = f + sizeof pre - 1, *end = f + len;
    long long id = 0;
    const char *digits = p;
    while (p < end && *p >= '0' && *p <= '9' && p - digits < 18)
        id = id * 10 + (*p++ - '0');
    if (p == digits || (size_t)(end - p) < sizeof mid + 1 || memcmp(p, mid, sizeof mid - 1))
        return false;
    const char *data = p + sizeof mid - 1;
    size_t n = (size_t)(end - 2 - data);
    if (memchr(data, '"', n) || memchr(data, '\\', n))
        return false;
    write_data(id, data, n);
    return true;
}

/* Splits the input into frames. A marker (resync) may arrive anywhere, even mid-frame. */
static void consume_input(const unsigned char *data, size_t n) {
    size_t start = 0;
    /* only runs of 0xFF matter: memchr skips everything else */
    const unsigned char *p = data, *end = data + n;
    while (p < end && (p = memchr(p, 0xff, (size_t)(end - p)))) {
        if (p > data && p[-1] != 0xff)
            ff_run = 0;
        if (++ff_run == MARKER_LEN) {
            ff_run = 0;
            resync();
            start = (size_t)(p - data) + 1;
        }
        p++;
    }
    if (n && data[n - 1] != 0xff)
        ff_run = 0;
    if (desynced)
        return;
    buf_append(&inq, &inq_len, &inq_cap, data + start, n - start);
    size_t off = 0;
    while (inq_len - off >= 4) {
        const unsigned char *h = inq + off;
        uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        if (len == 0 || len > MAX_FRAME) {
            logf_("framing error (length %u): waiting for the host to resync", len);
            desynced = true;
            inq_len = 0;
            return;
        }
        if (inq_len - off - 4 < len)
            break;
        if (fast_write_data((const char *)h + 4, len)) {
            off += 4 + len;
            continue;
        }
        json_error_t jerr;
        json_t *req = json_loadb((const char *)h + 4, len, 0, &jerr);
        off += 4 + len;
        if (!json_is_object(req)) {
            json_decref(req);
            logf_("bad frame (%s): waiting for the host to resync", jerr.text);
            desynced = true;
            inq_len = 0;
            return;
        }
        handle_frame(req);
        json_decref(req);
    }
    memmove(inq, inq + off, inq_len - off);
    inq_len -= off;
}

static bool find_port(const char *name) {
    DIR *d = opendir("/sys/class/virtio-ports");
    if (!d)
        return false;
    struct dirent *de;
    bool found = false;
    while (!found && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[300], buf[128] = {0};
        snprintf(p, sizeof p, "/sys/class/virtio-ports/%s/name", de->d_name);
        int fd = open(p, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        while (n > 0 && (buf[n - 1] == '\n'))
            buf[--n] = 0;
        if (n > 0 && !strcmp(buf, name)) {
            snprintf(port_path, sizeof port_path, "/dev/%s", de->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* `corral-agent load-modules DIR LIST...`: the modules named in each LIST (one a line,
 * dependencies first), loaded from DIR/<name>.ko with finit_module in this one process (an insmod per
 * module costs a fork+exec each, ~40 ms under TCG). Options come from the kernel command
 * line's <module>.<param>=<value>, as modprobe would pass them. */
static int load_module_list(const char *dir, const char *list_path) {
    char cmdline[4096] = {0};
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
        cmdline[n > 0 ? n : 0] = 0;
        close(fd);
    }
    FILE *list = fopen(list_path, "re");
    if (!list) {
        logf_("cannot open %s: %s", list_path, strerror(errno));
        return 1;
    }
    char name[128];
    int failed = 0;
    while (fgets(name, sizeof name, list)) {
        name[strcspn(name, "\r\n")] = 0;
        if (!*name)
            continue;
        char params[2048] = "", prefix[160], copy[4096];
        snprintf(prefix, sizeof prefix, "%s.", name);
        snprintf(copy, sizeof copy, "%s", cmdline);
        for (char *save = NULL, *tok = strtok_r(copy, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
            if (strncmp(tok, prefix, strlen(prefix)) || !strchr(tok, '='))
                continue;
            size_t used = strlen(params);
            snprintf(params + used, sizeof params - used, "%s%s", used ? " " : "", tok + strlen(prefix));
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s.ko", dir, name);
        int mfd = open(path, O_RDONLY | O_CLOEXEC);
        if (mfd < 0 || (syscall(SYS_finit_module, mfd, params, 0) < 0 && errno != EEXIST)) {
            logf_("cannot load module %s: %s", name, strerror(errno));
            failed++;
        }
        if (mfd >= 0)
            close(mfd);
    }
    fclose(list);
    return failed ? 1 : 0;
}

static int load_modules(int n, char **lists) {
    int rc = 0;
    for (int i = 1; i < n; i++)
        rc |= load_module_list(lists[0], lists[i]);
    return rc;
}

static void fatal_boot(const char *why) {
    /* the host watches the console for this line */
    dprintf(2, "CORRAL-INIT-ERROR: %s\n", why);
    poweroff_now();
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "load-modules"))
        return load_modules(argc - 2, argv + 2);
    const char *port_name = "corral.agent";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port-name") && i + 1 < argc)
            port_name = argv[++i];
        else if (!strcmp(argv[i], "--tty") && i + 1 < argc)
            tty_path = argv[++i];
    }
    b64_init();
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sig_fd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);

    double deadline = now_s() + 10;
    while (!find_port(port_name)) {
        if (now_s() > deadline)
            fatal_boot("no virtio-serial port named corral.agent");
        usleep(10000);
    }
    port_fd = open(port_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (port_fd < 0)
        fatal_boot("cannot open the agent port");
    guard_memory();
    if (tty_path)
        spawn_tty_shell();
    /* tells a host that connected before us to (re)send its hello */
    send_marker();
    send_frame(json_pack("{s:i,s:s,s:i}", "id", 0, "type", "ready", "version", PROTOCOL_VERSION));
    logf_("ready on %s", port_path);

    struct pollfd *pfds = NULL;
    struct req **owners = NULL;
    size_t cap = 0;
    static unsigned char buf[256 << 10];
    for (;;) {
        double now = now_s();
        int timeout_ms = -1;
        size_t n = 0, need = 3;
        for (struct req *r = reqs; r; r = r->next)
            need += 3;
        if (need > cap) {
            cap = need * 2;
            pfds = xrealloc(pfds, cap * sizeof *pfds);
            owners = xrealloc(owners, cap * sizeof *owners);
        }
        pfds[n] = (struct pollfd){sig_fd, POLLIN, 0};
        owners[n++] = NULL;
        size_t port_idx = (size_t)-1;
        if (connected) {
            port_idx = n;
            pfds[n] = (struct pollfd){port_fd, (short)(POLLIN | (outq_len ? POLLOUT : 0)), 0};
            owners[n++] = NULL;
        } else {
            timeout_ms = DISCONNECTED_POLL_MS;
        }
        bool room = outq_len < OUTQ_HIGH;
        for (struct req *r = reqs; r; r = r->next) {
            if (r->kind == K_READ && room && r->credit != 0)
                timeout_ms = 0;
            if (r->kind != K_EXEC)
                continue;
            if (room && r->out.fd >= 0) {
                pfds[n] = (struct pollfd){r->out.fd, POLLIN, 0};
                owners[n++] = r;
            }
            if (room && r->err.fd >= 0) {
                pfds[n] = (struct pollfd){r->err.fd, POLLIN, 0};
                owners[n++] = r;
            }
            if (r->in_fd >= 0) {
                pfds[n] = (struct pollfd){r->in_fd, POLLOUT, 0};
                owners[n++] = r;
            }
            double due = r->exited ? r->grace_deadline : r->timed_out ? -1 : r->deadline;
            if (due >= 0) {
                int ms = due <= now ? 0 : (int)((due - now) * 1000) + 1;
                if (timeout_ms < 0 || ms < timeout_ms)
                    timeout_ms = ms;
            }
        }
        if (tty_path && tty_pid < 0) {
            /* respawn, at most once a second (a shell that cannot start must not spin) */
            double wait = tty_last_spawn + 1 - now;
            if (wait <= 0)
                spawn_tty_shell();
            else if (timeout_ms < 0 || wait * 1000 < timeout_ms)
                timeout_ms = (int)(wait * 1000) + 1;
        }
        int rc = poll(pfds, n, timeout_ms);
        if (rc < 0 && errno != EINTR) {
            logf_("poll: %s", strerror(errno));
            continue;
        }
        if (pfds[0].revents) {
            struct signalfd_siginfo si;
            while (read(sig_fd, &si, sizeof si) > 0) {
            }
            reap();
        }
        if (!connected) {
            /* POLLHUP while no host is connected: look again every DISCONNECTED_POLL_MS */
            struct pollfd p = {port_fd, POLLIN, 0};
            if (poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP))
                connected = true;
        } else if (port_idx != (size_t)-1) {
            short ev = pfds[port_idx].revents;
            if (ev & POLLIN) {
                /* A read returns one virtio buffer (4 KiB host->guest): gather what is
                 * there before parsing, rather than one trip round the loop per buffer. */
                size_t have = 0;
                while (have < sizeof buf) {
                    ssize_t got = read(port_fd, buf + have, sizeof buf - have);
                    if (got > 0) {
                        have += (size_t)got;
                        continue;
                    }
                    if (got == 0)
                        connected = false;
                    else if (errno == EINTR)
                        continue;
                    break;
                }
                if (have)
                    consume_input(buf, have);
            } else if (ev & POLLHUP) {
                connected = false;
            }
            if (connected && (ev & POLLOUT))
                flush_out();
        }
        for (size_t i = 0; i < n; i++) {
            struct req *r = owners[i];
            if (!r || !pfds[i].revents || !req_alive(r))
                continue;
            if (pfds[i].fd == r->out.fd)
                exec_read(r, &r->out, "stdout");
            else if (pfds[i].fd == r->err.fd)
                exec_read(r, &r->err, "stderr");
            else if (pfds[i].fd == r->in_fd)
                exec_feed_stdin(r);
        }
        now = now_s();
        struct req *next;
        for (struct req *r = reqs; r; r = next) {
            next = r->next;
            if (r->kind != K_EXEC)
                continue;
            if (!r->exited && !r->timed_out && now >= r->deadline) {
                r->timed_out = true;
                kill_command(r->pid);
            }
            if (r->exited && ((r->out.fd < 0 && r->err.fd < 0) || now >= r->grace_deadline))
                exec_finish(r);
        }
        pump_reads();
        flush_out();
    }
}
