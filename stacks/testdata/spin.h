// spin.h: the fixtures' busy loop, spin(SECS) on the CPU for SECS of
// wall time.
#include <time.h>

static volatile unsigned long sink;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin(double secs) {
	double end = now() + secs;
	while (now() < end)
		for (int i = 0; i < 10000; i++)
			sink += i;
}
