// A USDT and uprobe fixture: every probe fires exactly N times (argv[1]),
// with values known from the loop index.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>

void tk_fire_guarded(int i); // guarded.c: a probe behind a semaphore
unsigned short tk_semaphore(void);
void tk_lib_fire(int i);     // lib.c, in libtk.so (with -DTK_LIB)

volatile long tk_global = -7;
long tk_table[4] = {10, -20, 30, -40};

// tk:many has 300 call sites, each passing its own constant (100 .. 399):
// one run attaches 300 uprobes, and ends with detaching them.
#define TK_M1(k) STAP_PROBE1(tk, many, k);
#define TK_M10(k) TK_M1(k##0) TK_M1(k##1) TK_M1(k##2) TK_M1(k##3) TK_M1(k##4) \
	TK_M1(k##5) TK_M1(k##6) TK_M1(k##7) TK_M1(k##8) TK_M1(k##9)
#define TK_M100(k) TK_M10(k##0) TK_M10(k##1) TK_M10(k##2) TK_M10(k##3) TK_M10(k##4) \
	TK_M10(k##5) TK_M10(k##6) TK_M10(k##7) TK_M10(k##8) TK_M10(k##9)
__attribute__((noinline)) void tk_many(void) {
	TK_M100(1) TK_M100(2) TK_M100(3)
}

__attribute__((noinline)) long tk_add(long a, long b) {
	__asm__ volatile("" ::: "memory");
	return a + b;
}

// With "wait" as argv[2], the fixture reads a line before it fires, says
// "fired", reads another line, prints its semaphore's value and exits: a
// test can attach to it with -p in between, and see the semaphore fall
// back to 0 once the tracer is gone.
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
	char line[64];
	if (wait && !fgets(line, sizeof line, stdin))
		return 4;
	// A probe reads memory without faulting pages in: touch the table's
	// page (at -O2 only the probe would read it).
	if (tk_table[argc & 3] == 12345)
		return 3;
	char str[32];
	strcpy(str, "tk-string"); // written here: its page is touched
	for (int i = 0; i < n; i++) {
		int neg = -i - 1;
		long long wide = 0x100000000LL * (i + 1);
		unsigned char small = (unsigned char)(200 + i);
		short sh = (short)(-300 - i);
		STAP_PROBE(tk, plain);
		STAP_PROBE5(tk, args, neg, wide, str, small, sh);
		STAP_PROBE1(tk, constant, 42);
		STAP_PROBE1(tk, global, tk_global);
		STAP_PROBE2(tk, indexed, tk_table[i & 3], i);
		tk_fire_guarded(i);
		switch (i % 10) { // one probe, ten call sites
		case 0: STAP_PROBE1(tk, sites, 0); break;
		case 1: STAP_PROBE1(tk, sites, 1); break;
		case 2: STAP_PROBE1(tk, sites, 2); break;
		case 3: STAP_PROBE1(tk, sites, 3); break;
		case 4: STAP_PROBE1(tk, sites, 4); break;
		case 5: STAP_PROBE1(tk, sites, 5); break;
		case 6: STAP_PROBE1(tk, sites, 6); break;
		case 7: STAP_PROBE1(tk, sites, 7); break;
		case 8: STAP_PROBE1(tk, sites, 8); break;
		default: STAP_PROBE1(tk, sites, 9); break;
		}
		tk_add(i, 1000);
		tk_many();
#ifdef TK_LIB
		tk_lib_fire(i);
#endif
	}
	if (wait) {
		printf("fired\n");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 4;
		printf("semaphore %u\n", tk_semaphore());
	}
	return 0;
}
