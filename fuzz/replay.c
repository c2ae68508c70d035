/*
 * replay.c -- runs one fuzzing entry point over files, without libFuzzer
 * (docs/FUZZ.md): `fuzz_FORMAT DIR|FILE ...` feeds every regular file of
 * each directory (sorted by name, not recursive) and each file given to
 * LLVMFuzzerTestOneInput once, with a 10 s alarm per input (a hang is a
 * failure). Built with gcc and ASan/UBSan by `make fuzz-replay`; a
 * sanitizer report, a crash or an abort of the entry point ends the
 * process with a non-zero status, naming the input on stderr first.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT ((size_t)64 << 20)

static const char *g_current = "(none)";

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "replay: timeout (10 s) on input ";
    ssize_t w = write(2, m, sizeof m - 1);
    w = write(2, g_current, strlen(g_current));
    w = write(2, "\n", 1);
    (void)w;
    _exit(70);
}

/* Runs the entry point on the file at path; returns 0, or 1 when it
 * cannot be read. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    size_t n = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory\n");
        return 1;
    }
    uint8_t *exact = malloc(n ? n : 1); /* exactly n bytes: ASan sees reads past the input */
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    g_current = path;
    alarm(10);
    LLVMFuzzerTestOneInput(exact, n);
    alarm(0);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order; *runs counts them. */
static int run_dir(const char *dir, long *runs)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(names, cap * sizeof *names);
            if (!g)
                return 1;
            names = g;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            bad |= run_file(path);
            (*runs)++;
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    signal(SIGALRM, on_alarm);
    long runs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            continue; /* a format without reproducers has no crashes/ folder */
        } else if (S_ISDIR(sb.st_mode)) {
            bad |= run_dir(argv[i], &runs);
        } else {
            bad |= run_file(argv[i]);
            runs++;
        }
    }
    fprintf(stderr, "replay %s: %ld inputs, %s\n", argv[0], runs, bad ? "FAILED" : "ok");
    return bad;
}
