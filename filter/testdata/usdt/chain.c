// fx-chain, for --count-by ustack: argv[1] calls of tk_leaf(7) through
// main -> tk_a -> tk_b, then argv[2] calls of tk_leaf(9) through main ->
// tk_c. tk_leaf writes n bytes at fd 987654, which no process has: the
// pwrite fails after its tracepoint fires. Built -O2 -fomit-frame-pointer,
// so that no function keeps a frame pointer (a frame-pointer walk, as
// bpftrace's ustack, stops after a frame or two), none inlined, no call a
// tail call. It first sleeps 300 ms: a tracer reads its mappings then.
// argv[3] more calls go to tk_call(tk_nop, i), for usym(arg0); then it
// sleeps argv[4] milliseconds (a process that is still there when its
// addresses are named).
#include <stdlib.h>
#include <unistd.h>

static char buf[16];
static volatile long sink;

__attribute__((noinline)) void tk_leaf(long n)
{
	if (pwrite(987654, buf, n, 0) >= 0)
		exit(1);
	sink++;
}

__attribute__((noinline)) void tk_b(long n)
{
	tk_leaf(n);
	sink++;
}

__attribute__((noinline)) void tk_a(long n)
{
	tk_b(n);
	sink++;
}

__attribute__((noinline)) void tk_c(long n)
{
	tk_leaf(n);
	sink++;
}

__attribute__((noinline)) void tk_nop(long n)
{
	sink += n;
}

__attribute__((noinline)) void tk_call(void (*fn)(long), long n)
{
	fn(n);
	sink++;
}

int main(int argc, char **argv)
{
	long first = argc > 1 ? atol(argv[1]) : 1, second = argc > 2 ? atol(argv[2]) : 1;
	long third = argc > 3 ? atol(argv[3]) : 0;
	usleep(300000);
	for (long i = 0; i < first; i++)
		tk_a(7);
	for (long i = 0; i < second; i++)
		tk_c(9);
	for (long i = 0; i < third; i++)
		tk_call(tk_nop, i);
	if (argc > 4)
		usleep(atol(argv[4]) * 1000);
	return 0;
}
