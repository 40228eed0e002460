/* An attacker's toolbox: the syscalls a hostile program would try, one command per call.
 *
 * Built static by the security suite (tests/security/conftest.py) and uploaded into
 * sandboxes through the files API, as a tenant would; sent as source to fncall's "c"
 * runtime. Each command prints one line per attempt, "<what> OK" or "<what> <ERRNO>",
 * so the tests judge the result, not this program. With no arguments the command line is
 * read from stdin (fncall test cases feed it that way).
 *
 *   probe sys <name>...          try each named syscall in its most harmless form
 *   probe addkey <desc> <data>   add a "user" key to the user keyring
 *   probe readkey <desc>         look it up in the user keyring and print its payload
 *   probe inotify <n> [file]     open n inotify instances; with a file, write the count
 *                                there and hold them until killed
 *   probe ptrace <pid>...        PTRACE_ATTACH (then detach) each pid
 *   probe tcp <ipv4> <port>      connect, 1 s timeout
 *   probe vsock <cid> <port>     connect an AF_VSOCK stream socket
 *   probe unix <path>...         connect an AF_UNIX stream socket to each path
 *   probe open <path>...         open each path read-only
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

static void report(const char *what, long rc) {
    if (rc < 0) {
        const char *name = strerrorname_np(errno);
        printf("%s %s\n", what, name ? name : "E?");
    } else {
        printf("%s OK\n", what);
    }
}

static long try_sys(const char *name) {
    if (!strcmp(name, "keyctl"))
        return syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0);
    if (!strcmp(name, "add_key"))
        return syscall(SYS_add_key, "user", "corral-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING);
    if (!strcmp(name, "request_key")) {
        long rc = syscall(SYS_request_key, "user", "corral-probe-absent", NULL, 0);
        if (rc < 0 && errno == ENOKEY)
            return 0;  /* the call ran: there is just no such key */
        return rc;
    }
    if (!strcmp(name, "io_uring_setup")) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        return syscall(SYS_io_uring_setup, 4, &p);
    }
    if (!strcmp(name, "socket_vsock"))
        return socket(AF_VSOCK, SOCK_STREAM, 0);
    if (!strcmp(name, "socket_packet"))
        return socket(AF_PACKET, SOCK_RAW, htons(0x0003));
    if (!strcmp(name, "unshare_user"))
        return unshare(CLONE_NEWUSER);
    if (!strcmp(name, "unshare_mount"))
        return unshare(CLONE_NEWNS);
    if (!strcmp(name, "bpf")) {
        union bpf_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.map_type = BPF_MAP_TYPE_ARRAY;
        attr.key_size = 4;
        attr.value_size = 4;
        attr.max_entries = 1;
        return syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
    }
    if (!strcmp(name, "perf_event_open")) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_TASK_CLOCK;
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        return syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    }
    if (!strcmp(name, "userfaultfd"))
        return syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (!strcmp(name, "mount")) {
        mkdir("/tmp/.probe-mnt", 0700);
        return mount("none", "/tmp/.probe-mnt", "tmpfs", 0, "size=1m");
    }
    if (!strcmp(name, "open_by_handle_at")) {
        struct { struct file_handle h; unsigned char bytes[128]; } fh;
        int mount_id;
        fh.h.handle_bytes = 128;
        if (name_to_handle_at(AT_FDCWD, "/", &fh.h, &mount_id, 0) < 0)
            return -1;
        return open_by_handle_at(AT_FDCWD, &fh.h, O_RDONLY);
    }
    if (!strcmp(name, "kexec_load"))
        return syscall(SYS_kexec_load, 0, 0, NULL, 0);
    if (!strcmp(name, "init_module"))
        return syscall(SYS_init_module, NULL, 0, "");
    if (!strcmp(name, "setns"))
        return setns(open("/proc/self/ns/net", O_RDONLY), 0);
    errno = EINVAL;
    return -1;
}

/* Each attempt in a child of its own, so one that succeeds (a new namespace) cannot change
 * what the next one sees. */
static int cmd_sys(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        fflush(stdout);
        pid_t child = fork();
        if (child < 0) {
            report("fork", -1);
            return 1;
        }
        if (child == 0) {
            report(argv[i], try_sys(argv[i]));
            fflush(stdout);
            _exit(0);
        }
        waitpid(child, NULL, 0);
    }
    return 0;
}

static int cmd_addkey(char *desc, char *data) {
    long id = syscall(SYS_add_key, "user", desc, data, strlen(data), KEY_SPEC_USER_KEYRING);
    report("addkey", id);
    return 0;
}

static int cmd_readkey(char *desc) {
    long id = syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, "user", desc, 0);
    if (id < 0) {
        report("readkey", -1);
        return 0;
    }
    char buf[4096];
    long n = syscall(SYS_keyctl, KEYCTL_READ, id, buf, sizeof buf - 1);
    if (n < 0) {
        report("readkey", -1);
        return 0;
    }
    buf[n < (long)sizeof buf - 1 ? n : (long)sizeof buf - 1] = 0;
    printf("readkey FOUND %s\n", buf);
    return 0;
}

static int cmd_inotify(int n, const char *hold) {
    int got = 0;
    long rc = 0;
    for (; got < n; got++) {
        rc = inotify_init1(IN_CLOEXEC);
        if (rc < 0)
            break;
    }
    if (got < n)
        report("inotify", -1);
    else
        report("inotify", 0);
    printf("inotify held %d\n", got);
    if (hold) {
        FILE *f = fopen(hold, "w");
        if (!f)
            return 1;
        fprintf(f, "%d\n", got);
        fclose(f);
        fflush(stdout);
        for (;;)
            pause();
    }
    return 0;
}

static int cmd_ptrace(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        pid_t pid = atoi(argv[i]);
        char what[64];
        snprintf(what, sizeof what, "ptrace %d", pid);
        long rc = ptrace(PTRACE_ATTACH, pid, 0, 0);
        report(what, rc);
        if (rc == 0) {
            waitpid(pid, NULL, __WALL);
            ptrace(PTRACE_DETACH, pid, 0, 0);
        }
    }
    return 0;
}

static int connect_timeout(int fd, struct sockaddr *sa, socklen_t len) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
    if (connect(fd, sa, len) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 1000) != 1) {
        errno = ETIMEDOUT;
        return -1;
    }
    int err = 0;
    socklen_t elen = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

static int cmd_tcp(const char *ip, int port) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char what[80];
    snprintf(what, sizeof what, "tcp %s:%d", ip, port);
    report(what, fd < 0 ? -1 : connect_timeout(fd, (struct sockaddr *)&sa, sizeof sa));
    return 0;
}

static int cmd_vsock(unsigned cid, unsigned port) {
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = cid, .svm_port = port};
    int fd = socket(AF_VSOCK, SOCK_STREAM, 0);
    char what[80];
    snprintf(what, sizeof what, "vsock %u:%u", cid, port);
    report(what, fd < 0 ? -1 : connect_timeout(fd, (struct sockaddr *)&sa, sizeof sa));
    return 0;
}

static int cmd_unix(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        strncpy(sa.sun_path, argv[i], sizeof sa.sun_path - 1);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        char what[PATH_MAX + 16];  /* the whole path: the test finds its line by it */
        snprintf(what, sizeof what, "unix %s", argv[i]);
        report(what, fd < 0 ? -1 : connect_timeout(fd, (struct sockaddr *)&sa, sizeof sa));
        if (fd >= 0)
            close(fd);
    }
    return 0;
}

static int cmd_open(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        char what[PATH_MAX + 16];  /* the whole path: the test finds its line by it */
        snprintf(what, sizeof what, "open %s", argv[i]);
        int fd = open(argv[i], O_RDONLY);
        report(what, fd);
        if (fd >= 0)
            close(fd);
    }
    return 0;
}

static int run(int argc, char **argv) {
    if (argc < 1)
        return 2;
    const char *cmd = argv[0];
    if (!strcmp(cmd, "sys"))
        return cmd_sys(argc - 1, argv + 1);
    if (!strcmp(cmd, "addkey") && argc == 3)
        return cmd_addkey(argv[1], argv[2]);
    if (!strcmp(cmd, "readkey") && argc == 2)
        return cmd_readkey(argv[1]);
    if (!strcmp(cmd, "inotify") && argc >= 2)
        return cmd_inotify(atoi(argv[1]), argc > 2 ? argv[2] : NULL);
    if (!strcmp(cmd, "ptrace"))
        return cmd_ptrace(argc - 1, argv + 1);
    if (!strcmp(cmd, "tcp") && argc == 3)
        return cmd_tcp(argv[1], atoi(argv[2]));
    if (!strcmp(cmd, "vsock") && argc == 3)
        return cmd_vsock(strtoul(argv[1], NULL, 10), strtoul(argv[2], NULL, 10));
    if (!strcmp(cmd, "unix"))
        return cmd_unix(argc - 1, argv + 1);
    if (!strcmp(cmd, "open"))
        return cmd_open(argc - 1, argv + 1);
    fprintf(stderr, "probe: unknown command %s\n", cmd);
    return 2;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1)
        return run(argc - 1, argv + 1);
    static char line[4096];
    char *words[64];
    int n = 0;
    if (!fgets(line, sizeof line, stdin))
        return 2;
    for (char *w = strtok(line, " \t\n"); w && n < 64; w = strtok(NULL, " \t\n"))
        words[n++] = w;
    return run(n, words);
}
