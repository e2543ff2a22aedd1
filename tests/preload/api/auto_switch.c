/*
 * auto_switch.c — under VMAPALLOC_BACKEND=auto (the default), every kind of
 * small request counts toward the switch from glibc to the slabs, and the
 * threads of a process count together:
 *
 *   api_auto_switch KIND COUNT THREADS
 *
 * makes COUNT small requests of KIND (malloc, calloc, memalign, realloc),
 * in the first thread (THREADS 1) or spread over THREADS threads started for
 * it, each freed at once, then says whether a fresh malloc(48) is the slabs'
 * (vmapalloc owns it) and exits 0 when that is what AUTO_AFTER (65536 by
 * default) says it should be: in the first thread, the switch once COUNT
 * reaches AUTO_AFTER plus a batch (128, or AUTO_AFTER if less), none while
 * it stays below AUTO_AFTER; in the other threads, the switch once one of
 * them has made a short batch of 8 (or the batch, if less), none while every
 * one stays short of it (a thread that makes a call or two and exits).
 * Run with no arguments, every case in its own process (an exec of itself),
 * each both ways.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmtest.h"

struct job {
    const char *kind;
    long count;
};

static void *work(void *arg)
{
    const struct job *j = arg;
    void *keep = NULL;
    for (long i = 0; i < j->count; i++) {
        size_t n = 16 + (size_t)(i % 24) * 8;
        if (!strcmp(j->kind, "malloc")) {
            free(vmt_ptr(malloc(n)));
        } else if (!strcmp(j->kind, "calloc")) {
            free(vmt_ptr(calloc(1, n)));
        } else if (!strcmp(j->kind, "memalign")) {
            free(vmt_ptr(memalign(32, n)));
        } else {
            keep = realloc(keep, n); /* grows and shrinks one block */
            CHECK(keep != NULL, "realloc(%zu)", n);
        }
    }
    free(keep);
    return NULL;
}

static int one_case(const char *kind, long count, int threads)
{
    const char *env = getenv("VMAPALLOC_AUTO_AFTER");
    long after = env ? atol(env) : 65536;
    struct job j = {kind, count / threads};
    if (threads == 1) {
        work(&j);
    } else {
        pthread_t t[16];
        for (int i = 0; i < threads; i++)
            CHECK(pthread_create(&t[i], NULL, work, &j) == 0, "pthread_create");
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
    }
    void *p = malloc(48);
    int slabs = vm.owns(p);
    long batch = after < 128 ? after : 128, first = batch < 8 ? batch : 8;
    int want = threads == 1 && count >= after + batch ? 1
             : threads == 1 && count < after          ? 0
             : threads > 1 && j.count >= first        ? 1
             : threads > 1 && count < after           ? 0
                                                      : -1; /* either */
    printf("%-8s %7ld calls in %d thread(s): %s (AUTO_AFTER %ld)\n", kind, j.count * threads,
           threads, slabs ? "slabs" : "glibc", after);
    if (want >= 0)
        CHECK(slabs == want, "%s x%ld in %d threads: the slabs %s serve", kind,
              j.count * threads, threads, want ? "should" : "should not");
    free(p);
    return 0;
}

int main(int argc, char **argv)
{
    vmt_init("auto_switch");
    if (argc == 4)
        return one_case(argv[1], atol(argv[2]), atoi(argv[3]));
    static const char *kinds[] = {"malloc", "calloc", "memalign", "realloc"};
    /* COUNT past the switch in the first thread, short of it there, in
     * two threads that each make one short batch, and in sixteen that each
     * stay short of one. */
    static const struct { long count; int threads; } runs[] = {
        {70000, 1}, {60000, 1}, {16, 2}, {112, 16}};
    int bad = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            char count[32], threads[8];
            snprintf(count, sizeof count, "%ld", runs[r].count);
            snprintf(threads, sizeof threads, "%d", runs[r].threads);
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                execl("/proc/self/exe", argv[0], kinds[k], count, threads, (char *)NULL);
                _exit(127);
            }
            int st;
            waitpid(pid, &st, 0);
            bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
    }
    printf("auto_switch: %s\n", bad ? "FAILED" : "OK");
    return bad;
}
