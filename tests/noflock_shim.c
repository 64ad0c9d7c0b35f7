/* A file system without flock, for the Slurm tests: LD_PRELOADed into a job, flock() on any file under
 * $FGRPO_TEST_NOFLOCK_DIR fails with ENOSYS, which is what Lustre mounted `noflock` answers; every other file
 * locks as usual (Ray's and the Hugging Face caches' locks live elsewhere, as on such a cluster's local disks). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int flock(int fd, int operation) {
    static int (*real_flock)(int, int);
    const char *dir = getenv("FGRPO_TEST_NOFLOCK_DIR");
    if (dir != NULL && *dir != '\0') {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        size_t len = strlen(dir);
        if (n > 0) {
            target[n] = '\0';
            if (strncmp(target, dir, len) == 0 && (target[len] == '/' || target[len] == '\0')) {
                errno = ENOSYS;
                return -1;
            }
        }
    }
    if (real_flock == NULL)
        real_flock = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
    return real_flock(fd, operation);
}
