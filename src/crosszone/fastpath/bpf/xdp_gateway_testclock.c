// SPDX-License-Identifier: GPL-2.0
/* Test build (build/xdp_gateway_testclock.o): the product's program with the clocks a test sets
 * (test_clock.h stands in for clock.h), for the traffic policy's tests. Never attached. */
#include "test_clock.h"
#include "xdp_gateway.c"
