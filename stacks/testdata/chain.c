// The profile fixture: main -> a -> b -> c, none inlined, built without
// frame pointers by the tests. c spins for the seconds given (default 2):
// in user space ("user"), or in the kernel reading /dev/zero ("syscall").
// With -DCHAIN_LIB, a, b and c live in a shared library: this file built
// with -DCHAIN_SO (no main; its constructor runs the chain first if
// CHAIN_CTOR is set).
// It first sleeps 1 s, so that c's samples are not the ones taken while
// the profiler reads the process's tables (unless the third argument is
// "now").
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#if defined(CHAIN_LIB) && !defined(CHAIN_SO)
void a(double secs, int sys);
#else
static char buf[1 << 20];
static volatile unsigned long sink;

__attribute__((noinline)) void c(double secs, int sys)
{
	double end = now() + secs;
	int fd = sys ? open("/dev/zero", O_RDONLY) : -1;
	while (now() < end) {
		if (sys) {
			if (read(fd, buf, sizeof buf) < 0)
				exit(1);
			continue;
		}
		for (int i = 0; i < 1000000; i++)
			sink += i;
	}
	if (fd >= 0)
		close(fd);
}

__attribute__((noinline)) void b(double secs, int sys)
{
	c(secs, sys);
	sink++;
}

__attribute__((noinline)) void a(double secs, int sys)
{
	b(secs, sys);
	sink++;
}
#endif

#ifdef CHAIN_SO
// CHAIN_CTOR=SECS: the library's constructor runs the chain for SECS
// first, called by the dynamic loader's start code (glibc: _dl_start_user
// -> _dl_init), which has no unwind row.
__attribute__((constructor)) static void ctor(void)
{
	const char *s = getenv("CHAIN_CTOR");
	if (s)
		a(atof(s), 0);
}
#endif

#ifndef CHAIN_SO
// What make bench reads with 1, 4 and 8 --label's (its cost per label);
// nothing here touches them.
__thread long tk_bench_n0 = 100, tk_bench_n1 = 101, tk_bench_n2 = 102, tk_bench_n3 = 103;
__thread char tk_bench_s0[16] = "/s0", tk_bench_s1[16] = "/s1", tk_bench_s2[16] = "/s2", tk_bench_s3[16] = "/s3";

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	int sys = argc > 2 && strcmp(argv[2], "syscall") == 0;
	// Off the CPU (no samples) while the profiler loads this process's
	// unwind tables: under qemu's TCG on a busy host that took over 300 ms.
	// "now" as the third argument skips that: a short-lived process whose
	// first samples come before its tables are read.
	if (argc < 4 || strcmp(argv[3], "now") != 0)
		usleep(1000000);
	double start = now();
	a(secs, sys);
	double spun = now() - start;
	// The CPU time the samples should add up to, for the tests, and the
	// wall time c spun: the most a one-thread process can be sampled for.
	// A virtual machine's stolen time is in the second, not the first
	// (the scheduler leaves it out), yet the CPU clock samples it.
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	fprintf(stderr, "chain: cpu %ld us, spun %ld us\n", (long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec, (long)(spun * 1e6));
	return 0;
}
#endif
