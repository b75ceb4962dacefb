/* realign: c spins SECS (argv[1], 1 by default) under main -> a -> b,
 * where b realigns its frame to 64 bytes for a local. With stack
 * arguments and alloca, gcc realigns through a dynamic realign argument
 * pointer (DRAP): CFA = *(rbp - 8) and the caller's rbp = *(rbp) in b's
 * body, DW_CFA_def_cfa_expression (DW_OP_breg6 -8; DW_OP_deref). It
 * first sleeps 1 s, as chain.c, while the profiler reads its tables. */
#include <stdlib.h>
#include <unistd.h>
#include "spin.h"

__attribute__((noinline)) void c(double secs, char *p)
{
	p[0]++;
	spin(secs);
	__asm__ volatile("");
}

__attribute__((noinline)) void b(double secs, long x1, long x2, long x3, long x4, long x5, long x6, long x7)
{
	char buf[64] __attribute__((aligned(64)));
	char *d = __builtin_alloca((x7 & 255) + 1);
	d[0] = x1 + x2 + x3 + x4 + x5 + x6;
	buf[0] = d[0];
	c(secs, buf);
	sink += buf[0];
}

__attribute__((noinline)) void a(double secs)
{
	b(secs, 1, 2, 3, 4, 5, 6, 7);
	sink++;
}

int main(int argc, char **argv)
{
	usleep(1000000);
	a(argc > 1 ? atof(argv[1]) : 1);
	return 0;
}
