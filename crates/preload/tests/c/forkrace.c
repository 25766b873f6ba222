/* A child forked while another thread is in posix_spawn (whose lock-file descriptors are
 * inheritable for that moment) closes its copy of a flocked description and execs: the
 * exec must not tell the new image that nothing is inherited, or the stray lock-file
 * descriptor it got would hold the flock for as long as the new image lives. argv[1] is
 * the mount prefix; prints FORKRACE-OK when, after the parent closes its descriptor, a
 * fresh process gets the flock while every child still sleeps (before this was fixed, 20-40
 * of 150 children held it for good). */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIDS 150

extern char **environ;
static volatile int stop;

static void *spawner(void *unused) {
    (void)unused;
    while (!stop) {
        pid_t p;
        char *argv[] = {"true", NULL};
        if (posix_spawn(&p, "/bin/true", NULL, NULL, argv, environ) == 0)
            waitpid(p, NULL, 0);
    }
    return NULL;
}

/* Whether a new process (its own open of `path`) gets an exclusive flock at once. */
static int free_to_lock(const char *path) {
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        int h = open(path, O_RDWR);
        _exit(h >= 0 && flock(h, LOCK_EX | LOCK_NB) == 0 ? 0 : 1);
    }
    int st;
    CHECK(waitpid(c, &st, 0) == c);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    char path[512];
    snprintf(path, sizeof path, "%s/locked", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, spawner, NULL) == 0);
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        pid_t c = fork();
        CHECK(c >= 0);
        if (c == 0) {
            close(fd);
            execl("/bin/sleep", "sleep", "60", (char *)NULL);
            _exit(127);
        }
        kids[i] = c;
        usleep(1000);
    }
    stop = 1;
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(!free_to_lock(path));
    close(fd);
    /* A child that has not finished starting its new image may still hold a stray for a
     * moment (the new image closes it at start-up): wait up to ten seconds. */
    int freed = 0;
    for (int i = 0; i < 200 && !freed; i++) {
        freed = free_to_lock(path);
        if (!freed)
            usleep(50000);
    }
    for (int i = 0; i < KIDS; i++)
        kill(kids[i], SIGKILL);
    for (int i = 0; i < KIDS; i++)
        waitpid(kids[i], NULL, 0);
    CHECK(freed);
    printf("FORKRACE-OK\n");
    return 0;
}
