// overload: C++ overloads and a template instance, f(int), f(double) and
// tmpl<int>(int), written in C under their mangled names (asm labels), so
// that gcc alone builds it, for every architecture. main spins in each in
// turn, the milliseconds of CPU time given (default 500) in each: in the
// 1-CPU guests profile reads the tables while the first one spins, and
// wall time gave it a sixth of the samples. A second argument repeats the
// three that many times (default once).
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

// spin_cpu spins for SECS of the thread's CPU time.
static void spin_cpu(double secs)
{
	struct timespec ts;
	double end;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	end = ts.tv_sec + ts.tv_nsec / 1e9 + secs;
	do {
		for (int i = 0; i < 10000; i++)
			sink += i;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	} while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

void f_int(int ms) __asm__("_Z1fi");
void f_double(double secs) __asm__("_Z1fd");
void tmpl_int(int ms) __asm__("_Z4tmplIiEvT_");

__attribute__((noinline)) void f_int(int ms) { spin_cpu(ms / 1000.0); }
__attribute__((noinline)) void f_double(double secs) { spin_cpu(secs); }
__attribute__((noinline)) void tmpl_int(int ms) { spin_cpu(ms / 1000.0); }

int main(int argc, char **argv)
{
	int ms = argc > 1 ? atoi(argv[1]) : 500;
	int rounds = argc > 2 ? atoi(argv[2]) : 1;
	for (int i = 0; i < rounds; i++) {
		f_int(ms);
		f_double(ms / 1000.0);
		tmpl_int(ms);
	}
	return 0;
}
