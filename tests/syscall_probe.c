/* Syscall probe for the seccomp tests: with an argument, first installs the BPF program in
   that file as a seccomp filter. Then reads lines "NR [A0..A5]" from stdin and prints
   "NR RET ERRNO" for each; the line "int80" makes a 32-bit getpid through int 0x80. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void load_filter(const char *path) {
    static struct sock_filter insns[4096];
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    size_t n = fread(insns, sizeof insns[0], 4096, f);
    fclose(f);
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp"); exit(2);
    }
}

int main(int argc, char **argv) {
    char line[512];
    if (argc > 1) load_filter(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'i') {
            long r;
            __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
            printf("int80 %ld 0\n", r);
            continue;
        }
        long a[7] = {0};
        if (sscanf(line, "%li %li %li %li %li %li %li", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6]) < 1)
            continue;
        errno = 0;
        long r = syscall(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
        printf("%ld %ld %d\n", a[0], r, r == -1 ? errno : 0);
    }
    return 0;
}
