// libtk.so: a probe and a function in a shared library.
#include <sys/sdt.h>

__attribute__((noinline)) long tk_lib_twice(long v) {
	__asm__ volatile("" ::: "memory");
	return 2 * v;
}

void tk_lib_fire(int i) {
	STAP_PROBE1(tklib, hit, i);
	tk_lib_twice(i);
}
