/* The library's environment variables. Each is read where it is used (a context at its
 * creation, a plan-level CPU call at each call), never cached in a global. An unset variable
 * means its default; a set one must hold one of the documented forms exactly (no whitespace,
 * no trailing characters), else the call fails with CAKE_ERROR_INVALID_ARGUMENT and a message
 * naming the variable and its value. */
#ifndef CAKE_ENV_H
#define CAKE_ENV_H

#include "cake.h"

/* CAKE_CHECK: "0" or "1". Unset: 0. */
cake_status cake_env_check(int *check);
/* CAKE_TIMEOUT_SECONDS: a finite decimal number >= 0 ("30", "0.5", "1e3"; 0 = no limit).
 * Unset: 0. */
cake_status cake_env_timeout(double *seconds);
/* CAKE_NUM_THREADS: a decimal integer in [1, CAKE_ENV_MAX_THREADS]. Unset: 0 (the caller's
 * default). */
#define CAKE_ENV_MAX_THREADS 4096
cake_status cake_env_threads(int *threads);

#endif
