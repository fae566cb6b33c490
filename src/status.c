/* Status strings and the per-thread message of the last failed call. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

const char *cake_status_string(cake_status status) {
    switch (status) {
    case CAKE_SUCCESS: return "success";
    case CAKE_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case CAKE_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CAKE_ERROR_UNSUPPORTED: return "unsupported";
    case CAKE_ERROR_COMMUNICATION: return "communication error";
    case CAKE_ERROR_TIMEOUT: return "timeout";
    case CAKE_ERROR_MISMATCH: return "ranks disagree";
    case CAKE_ERROR_INTERNAL: return "internal error";
    case CAKE_ERROR_CUDA: return "CUDA error";
    case CAKE_STATUS_COUNT: break;
    }
    return "unknown status";
}

const char *cake_last_error(void) { return last_error; }

void cake_clear_error(void) { last_error[0] = '\0'; }

cake_status cake_fail(cake_status status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return status;
}

void cake_version(int *major, int *minor, int *patch) {
    if (major) *major = CAKE_VERSION_MAJOR;
    if (minor) *minor = CAKE_VERSION_MINOR;
    if (patch) *patch = CAKE_VERSION_PATCH;
}
