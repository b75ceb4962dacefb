// overload: C++ overloads and a template instance, f(int), f(double) and
// tmpl<int>(int), written in C under their mangled names (asm labels), so
// that gcc alone builds it, for every architecture. main spins in each in
// turn, the milliseconds given (default 500) in each.
#include <stdlib.h>

#include "spin.h"

void f_int(int ms) __asm__("_Z1fi");
void f_double(double secs) __asm__("_Z1fd");
void tmpl_int(int ms) __asm__("_Z4tmplIiEvT_");

__attribute__((noinline)) void f_int(int ms) { spin(ms / 1000.0); }
__attribute__((noinline)) void f_double(double secs) { spin(secs); }
__attribute__((noinline)) void tmpl_int(int ms) { spin(ms / 1000.0); }

int main(int argc, char **argv)
{
	int ms = argc > 1 ? atoi(argv[1]) : 500;
	f_int(ms);
	f_double(ms / 1000.0);
	tmpl_int(ms);
	return 0;
}
