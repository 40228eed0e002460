/* Per-uid kernel state, probed from inside a sandbox (test_node_userns.py builds it static).
 *   probe addkey NAME     add a "user" key NAME to the user keyring: "added" | "refused <errno>"
 *   probe findkey NAME    search the user keyring for it: "found" | "missing" | "refused <errno>"
 *   probe fillkeys NAME   add keys NAME-0, NAME-1... until the uid's key quota says no:
 *                         "added <k> <EDQUOT|errno text>"
 *   probe inotify N       open up to N inotify instances: "opened <k> <EMFILE|ok|error>"
 *   probe hold-inotify N  the same, then hold them until killed
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEY_SPEC_USER_KEYRING -4
#define KEYCTL_SEARCH 10

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: probe addkey|findkey|fillkeys NAME | inotify|hold-inotify N\n");
        return 2;
    }
    if (!strcmp(argv[1], "addkey")) {
        long r = syscall(SYS_add_key, "user", argv[2], "secret", 6, KEY_SPEC_USER_KEYRING);
        if (r < 0) printf("refused %d\n", errno); else printf("added\n");
        return 0;
    }
    if (!strcmp(argv[1], "findkey")) {
        long r = syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, "user", argv[2], 0);
        if (r >= 0) printf("found\n");
        else if (errno == ENOKEY) printf("missing\n");
        else printf("refused %d\n", errno);
        return 0;
    }
    if (!strcmp(argv[1], "fillkeys")) {
        char name[256];
        int k = 0, err = 0;
        for (; k < 100000; k++) {
            snprintf(name, sizeof name, "%s-%d", argv[2], k);
            if (syscall(SYS_add_key, "user", name, "x", 1, KEY_SPEC_USER_KEYRING) < 0) { err = errno; break; }
        }
        printf("added %d %s\n", k, err == EDQUOT ? "EDQUOT" : err ? strerror(err) : "ok");
        return 0;
    }
    if (!strcmp(argv[1], "inotify") || !strcmp(argv[1], "hold-inotify")) {
        int want = atoi(argv[2]), k = 0, err = 0;
        for (; k < want; k++) {
            if (inotify_init1(IN_CLOEXEC) < 0) { err = errno; break; }
        }
        printf("opened %d %s\n", k, err == EMFILE ? "EMFILE" : err ? strerror(err) : "ok");
        fflush(stdout);
        if (argv[1][0] == 'i') return 0;
        close(1);
        close(2);
        for (;;) pause();
    }
    return 2;
}
