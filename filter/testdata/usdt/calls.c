// A fixture for calls seen whole: argv[1] times, tk_recurse(9, i) recurses
// to depth 0 and each level returns i*100 + its depth argument (so a
// return paired with the wrong entry shows), and tk_name(s) returns the
// length of a string known from i ("call-i", "-" when i is a multiple of
// 3). With "exit" as argv[2], the process then ends inside tk_exit, whose
// return never comes. With "nest" as argv[2], each round also calls
// tk_name from main, from tk_outer, from tk_nest inside tk_outer, and from
// tk_nest called by main (stack mode's nestings, recursion among them).
// Built at -O0: gcc -O2 turns the recursion into a loop.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) long tk_recurse(long depth, long i) {
	if (depth == 0)
		return i * 100;
	return tk_recurse(depth - 1, i) + 1;
}

__attribute__((noinline)) long tk_name(const char *s) {
	return (long)strlen(s);
}

__attribute__((noinline)) long tk_exit(int code) {
	fflush(stdout);
	exit(code);
}

// tk_nest recurses to depth 0, which calls tk_name.
__attribute__((noinline)) long tk_nest(long depth, const char *s) {
	if (depth == 0)
		return tk_name(s);
	return tk_nest(depth - 1, s) + 1;
}

__attribute__((noinline)) long tk_outer(const char *s) {
	return tk_name(s) + tk_nest(3, s);
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	char buf[32];
	long sum = 0;
	for (int i = 0; i < n; i++) {
		sum += tk_recurse(9, i);
		if (i % 3 == 0)
			strcpy(buf, "-");
		else
			snprintf(buf, sizeof buf, "call-%d", i);
		sum += tk_name(buf);
	}
	if (argc > 2 && strcmp(argv[2], "nest") == 0) {
		for (int i = 0; i < n; i++)
			sum += tk_name("main") + tk_outer("outer") + tk_nest(2, "nest");
	}
	printf("%ld\n", sum);
	if (argc > 2 && strcmp(argv[2], "exit") == 0)
		tk_exit(0);
	return 0;
}
