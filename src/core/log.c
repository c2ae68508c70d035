/* log.c -- leveled messages on stderr, one line each, safe from threads. */
#include "core/core.h"

#include <stdio.h>

static int g_level = 2;

void rap_log_set_level(int level) { g_level = level; }
int rap_log_level(void) { return g_level; }

static void emit(int level, const char *tag, const char *fmt, va_list ap)
{
    if (level > g_level)
        return;
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    /* one fprintf per line: stdio locks the stream, lines never interleave */
    fprintf(stderr, "%s%s\n", tag, line);
}

void rap_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(2, "", fmt, ap);
    va_end(ap);
}

void rap_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(1, "warning: ", fmt, ap);
    va_end(ap);
}

void rap_debug(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(3, "debug: ", fmt, ap);
    va_end(ap);
}
