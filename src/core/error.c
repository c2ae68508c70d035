/* error.c -- status names and the per-thread last-error message. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char g_msg[2048];

const char *rap_status_name(rap_status s)
{
    switch (s) {
    case RAP_OK: return "ok";
    case RAP_ERR_ARG: return "bad argument";
    case RAP_ERR_IO: return "i/o error";
    case RAP_ERR_DATA: return "bad data";
    case RAP_ERR_PLAN: return "bad plan";
    case RAP_ERR_NOMEM: return "out of memory";
    case RAP_ERR_CUDA: return "cuda error";
    case RAP_ERR_NO_GPU: return "no gpu";
    case RAP_ERR_INTERRUPTED: return "interrupted";
    case RAP_ERR_INTERNAL: return "internal error";
    case RAP_ERR_NO_ROWS: return "no usable rows";
    }
    return "unknown status";
}

const char *rap_last_error(void) { return g_msg; }

void rap_clear_error(void) { g_msg[0] = 0; }

rap_status rap_fail(rap_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return code;
}

rap_status rap_fail_context(rap_status code, const char *fmt, ...)
{
    char prefix[512], old[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    snprintf(g_msg, sizeof g_msg, "%s: %s", prefix, old);
    return code;
}
