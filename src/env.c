/* CAKE_CHECK, CAKE_TIMEOUT_SECONDS and CAKE_NUM_THREADS, parsed strictly: an invalid value is an
 * error that names the variable and the value, never a silent default. */
#include "env.h"

#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STRING(x) #x
#define EXPAND(x) STRING(x)

static cake_status invalid(const char *name, const char *expected, const char *value) {
    return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "%s: expected %s, got \"%.200s\"%s", name,
                     expected, value, strlen(value) > 200 ? " (cut)" : "");
}

cake_status cake_env_check(int *check) {
    const char *value = getenv("CAKE_CHECK");
    *check = 0;
    if (!value) return CAKE_SUCCESS;
    if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
        return invalid("CAKE_CHECK", "0 (off) or 1 (check mode on)", value);
    *check = value[0] == '1';
    return CAKE_SUCCESS;
}

/* Digits with an optional fraction and exponent: what strtod reads as a decimal, without the
 * forms it also takes (leading space, sign, hex, inf, nan). */
static int is_decimal(const char *s) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789.eE+-", *p) ||
            ((*p == '+' || *p == '-') && (p == s || (p[-1] != 'e' && p[-1] != 'E'))))
            return 0;
    return 1;
}

cake_status cake_env_timeout(double *seconds) {
    const char *value = getenv("CAKE_TIMEOUT_SECONDS");
    *seconds = 0.0;
    if (!value) return CAKE_SUCCESS;
    static const char expected[] = "a finite number of seconds >= 0, such as 30 or 0.5 (0 = no "
                                   "limit)";
    if (!is_decimal(value)) return invalid("CAKE_TIMEOUT_SECONDS", expected, value);
    char *end = NULL;
    errno = 0;
    const double t = strtod(value, &end);
    if (end == value || *end != '\0' || errno == ERANGE || !isfinite(t) || t < 0.0)
        return invalid("CAKE_TIMEOUT_SECONDS", expected, value);
    *seconds = t;
    return CAKE_SUCCESS;
}

cake_status cake_env_threads(int *threads) {
    const char *value = getenv("CAKE_NUM_THREADS");
    *threads = 0;
    if (!value) return CAKE_SUCCESS;
    long n = 0;
    int ok = value[0] != '\0';
    for (const char *p = value; *p && ok; p++) {
        ok = *p >= '0' && *p <= '9';
        if (ok) n = 10 * n + (*p - '0');
        if (n > CAKE_ENV_MAX_THREADS) ok = 0;
    }
    if (!ok || n < 1)
        return invalid("CAKE_NUM_THREADS", "an integer in [1, " EXPAND(CAKE_ENV_MAX_THREADS) "]", value);
    *threads = (int)n;
    return CAKE_SUCCESS;
}
