/* The report rank 0 prints at the end. */
#ifndef CAKE_DEMO_REPORT_H
#define CAKE_DEMO_REPORT_H

#include "demo.h"

/* Prints the report to stdout; returns 1 when every check passed, else 0. */
int demo_report(const demo_run *run);

#endif
