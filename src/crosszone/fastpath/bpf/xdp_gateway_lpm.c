// SPDX-License-Identifier: GPL-2.0
/* Benchmark baseline (build/xdp_gateway_lpm.o): the product's program with its routes in the
 * kernel's LPM trie (bench_lpm_route.h stands in for route.h). Never attached to a device. */
#include "bench_lpm_route.h"
#include "xdp_gateway.c"
