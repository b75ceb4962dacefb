// deep DEPTH SECS: a recursion DEPTH calls of d() deep under main, whose
// last spins for SECS seconds (default 5 and 2): stacks of a known depth,
// DEPTH + 5 user frames (spin, the d's, main and libc's start), for the
// unwinders' cost per frame (make bench). Built with frame pointers, so
// that a frame-pointer walk (bpftrace's ustack, profile --unwind=fp)
// reaches main as the tables' walk does.
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin(double secs)
{
	double end = now() + secs;
	while (now() < end)
		for (int i = 0; i < 1000000; i++)
			sink += i;
}

__attribute__((noinline)) void d(int n, double secs)
{
	if (n <= 1)
		spin(secs);
	else
		d(n - 1, secs);
	sink++;
}

int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 5;
	double secs = argc > 2 ? atof(argv[2]) : 2;
	d(depth < 1 ? 1 : depth, secs);
	return 0;
}
