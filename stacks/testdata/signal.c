// signal: a program that spends its time in a signal handler, whose
// stack runs through the kernel's signal frame into the interrupted code.
//
//	signal alrm|prof SECS: main -> a -> b spins while a timer (ITIMER_REAL
//	  or ITIMER_PROF, every 10 ms) interrupts it; the handler, on_signal ->
//	  hb -> hc, spins 7 ms of each period.
//	signal plt SECS: main -> a -> b calls getppid through its PLT stub
//	  after taking the read permission of getppid's GOT slot away: the
//	  stub's indirect jump faults, and the SIGSEGV handler (on_signal -> hb
//	  -> hc) spins 20 ms, gives the permission back and returns, and the
//	  jump is taken again. The handler touches no global and calls nothing
//	  through the PLT (its page of the GOT is unreadable): raw syscalls.
//
// Every function is built without frame pointers (build.sh). It first
// sleeps 1 s, off the CPU while the profiler reads its tables.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long rawsys(long n, long a, long b, long c)
{
	long ret;
#if defined(__x86_64__)
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	ret = x0;
#elif defined(__riscv) && __riscv_xlen == 64
	register long a7 __asm__("a7") = n;
	register long a0 __asm__("a0") = a;
	register long a1 __asm__("a1") = b;
	register long a2 __asm__("a2") = c;
	__asm__ volatile("ecall" : "+r"(a0) : "r"(a7), "r"(a1), "r"(a2) : "memory");
	ret = a0;
#elif defined(__arm__)
	register long r7 __asm__("r7") = n;
	register long r0 __asm__("r0") = a;
	register long r1 __asm__("r1") = b;
	register long r2 __asm__("r2") = c;
	__asm__ volatile("svc #0" : "+r"(r0) : "r"(r7), "r"(r1), "r"(r2) : "memory");
	ret = r0;
#else
#error "x86-64, arm64, riscv64 or 32-bit ARM"
#endif
	return ret;
}

static long mono_ns(void)
{
	struct timespec ts;
	rawsys(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&ts, 0);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

// What the handler reads is thread-local (local-exec: an offset from the
// thread pointer), never on the GOT's page, which may be unreadable.
static __thread volatile int done; // b's loop ends (timer modes)
static __thread long stop_ns;      // when the timer modes end
static __thread long got_page, page; // the GOT page made unreadable (plt)

__attribute__((noinline)) void hc(long ns)
{
	volatile unsigned long sum = 0;
	long end = mono_ns() + ns;
	while (mono_ns() < end)
		for (int i = 0; i < 20000; i++)
			sum += i;
}

__attribute__((noinline)) void hb(long ns)
{
	hc(ns);
	__asm__ volatile("" ::: "memory");
}

// The timer handler, and the SIGSEGV handler of plt mode, which gives
// the GOT page its permissions back.
__attribute__((noinline)) void on_signal(int sig)
{
	if (sig == SIGSEGV) {
		hb(20000000);
		rawsys(SYS_mprotect, got_page, page, PROT_READ | PROT_WRITE);
		return;
	}
	hb(7000000);
	if (mono_ns() >= stop_ns)
		done = 1;
}

__attribute__((noinline)) void b(int plt, int rounds)
{
	if (!plt) {
		while (!done)
			__asm__ volatile("" ::: "memory");
		return;
	}
	for (int k = 0; k < rounds; k++) {
		rawsys(SYS_mprotect, got_page, page, PROT_NONE);
		getppid(); // faults in getppid@plt
	}
}

__attribute__((noinline)) void a(int plt, int rounds)
{
	b(plt, rounds);
	__asm__ volatile("" ::: "memory");
}

extern void *_GLOBAL_OFFSET_TABLE_[];

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "alrm") && strcmp(argv[1], "prof") && strcmp(argv[1], "plt"))) {
		fprintf(stderr, "usage: signal alrm|prof|plt SECS\n");
		return 2;
	}
	double secs = atof(argv[2]);
	int plt = strcmp(argv[1], "plt") == 0;
	int sig = plt ? SIGSEGV : strcmp(argv[1], "alrm") == 0 ? SIGALRM : SIGPROF;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) != 0) {
		perror("sigaction");
		return 1;
	}
	usleep(1000000);
	if (plt) {
		// getppid's GOT slot, resolved by a first call: the slot of
		// .got.plt that holds its address (looked up by name: taking
		// its address here would make the call go through .plt.got).
		// riscv64's _GLOBAL_OFFSET_TABLE_ is past the PLT's slots (the
		// .got's own start is 15 slots below it at most).
		getppid();
		void *target = dlsym(RTLD_DEFAULT, "getppid");
		int slot = -64;
		for (int i = -15; i < 64; i++)
			if (_GLOBAL_OFFSET_TABLE_[i] == target)
				slot = i;
		if (slot == -64) {
			fprintf(stderr, "signal: getppid's GOT slot not found\n");
			return 1;
		}
		page = sysconf(_SC_PAGESIZE);
		got_page = (long)&_GLOBAL_OFFSET_TABLE_[slot] & -page;
		a(1, (int)(secs / 0.02));
		return 0;
	}
	stop_ns = mono_ns() + (long)(secs * 1e9);
	struct itimerval it = {{0, 10000}, {0, 10000}};
	if (setitimer(sig == SIGALRM ? ITIMER_REAL : ITIMER_PROF, &it, NULL) != 0) {
		perror("setitimer");
		return 1;
	}
	a(0, 0);
	return 0;
}
