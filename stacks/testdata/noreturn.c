/* noreturn: c spins SECS (argv[1], 1 by default) under main -> a -> b,
 * then exits: c never returns, so b's call of it is b's last
 * instruction, and the return address on the stack is the first byte of
 * the function after b (built with functions unaligned and in source
 * order). Named as it is, that frame would be "after"; named by the
 * address before it (the call), as perf names callers, it is b. It
 * first sleeps 1 s, as chain.c, while the profiler reads its tables. */
#include <stdlib.h>
#include <unistd.h>
#include "spin.h"

__attribute__((noinline, noreturn)) void c(double secs)
{
	spin(secs);
	exit(0);
}

__attribute__((noinline)) void b(double secs)
{
	c(secs);
}

__attribute__((noinline)) void after(double secs)
{
	spin(secs);
}

__attribute__((noinline)) void a(double secs)
{
	b(secs);
	after(secs);
}

int main(int argc, char **argv)
{
	usleep(1000000);
	a(argc > 1 ? atof(argv[1]) : 1);
	return 0;
}
