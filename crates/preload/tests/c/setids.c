/* A process that changes its credentials keeps the access of the descriptors it holds and
 * is checked as its new self from then on (argv[1]: a directory; run as root). A forked
 * child that drops to nobody before any other call writes to the log its parent opened;
 * the parent, with seteuid, loses and regains root's access. Prints SETIDS-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    CHECK(argc == 2 && geteuid() == 0);
    char secret[512], logp[512], made[512];
    snprintf(secret, sizeof secret, "%s/secret", argv[1]);
    snprintf(logp, sizeof logp, "%s/log", argv[1]);
    snprintf(made, sizeof made, "%s/made", argv[1]);
    int s = open(secret, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    CHECK(s >= 0 && write(s, "root's", 6) == 6 && close(s) == 0);
    int log = open(logp, O_CREAT | O_WRONLY | O_APPEND | O_TRUNC, 0644);
    CHECK(log >= 0 && write(log, "parent\n", 7) == 7);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
        CHECK(write(log, "child\n", 6) == 6); /* opened by root: still writable */
        CHECK(open(secret, O_RDONLY) == -1 && errno == EACCES);
        CHECK(open(made, O_CREAT | O_WRONLY, 0644) == -1 && errno == EACCES);
        CHECK(access(secret, R_OK) == -1 && errno == EACCES);
        CHECK(unlink(secret) == -1 && errno == EACCES);
        CHECK(chown(logp, 65534, 65534) == -1 && errno == EPERM);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* The parent: an effective uid of nobody, then root again (the saved uid is 0). */
    CHECK(seteuid(65534) == 0);
    CHECK(open(secret, O_RDONLY) == -1 && errno == EACCES);
    CHECK(write(log, "nobody\n", 7) == 7);
    CHECK(seteuid(0) == 0);
    s = open(secret, O_RDONLY);
    char back[8] = {0};
    CHECK(s >= 0 && read(s, back, 6) == 6 && strcmp(back, "root's") == 0 && close(s) == 0);
    CHECK(close(log) == 0);
    log = open(logp, O_RDONLY);
    char all[64] = {0};
    CHECK(log >= 0 && read(log, all, sizeof all - 1) == 20 && close(log) == 0);
    CHECK(strcmp(all, "parent\nchild\nnobody\n") == 0);
    CHECK(unlink(secret) == 0 && unlink(logp) == 0);
    printf("SETIDS-OK\n");
    return 0;
}
