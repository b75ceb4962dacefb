/* offcpu: waits in known proportions under two call chains, for
 * profile --off-cpu. Each round, a sleeps 100 ms in nanosleep(2), and b
 * reads a pipe that a child process writes 300 ms after it is forked:
 * ROUNDS rounds (argv[1], 3 by default) wait 100*ROUNDS ms under main ->
 * a and 300*ROUNDS ms under main -> b. A first wait of WARM ms (argv[2],
 * 0 by default), under main alone, comes before. The waits as the program
 * measured them (CLOCK_MONOTONIC around each; b's, from the fork on,
 * includes the child's start, slow under emulation) go to stderr at the end:
 * "offcpu: a N us, b N us, child N us".
 *
 * offcpu pingpong N: for the bench, a parent (under a) and a child
 * (under b) pass a byte back and forth N times through two pipes, each
 * blocking in read(2) in turn: context switches with deep-ish stacks. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, ms % 1000 * 1000000L};
	while (nanosleep(&t, &t) != 0)
		;
}

__attribute__((noinline)) void a(void)
{
	sleep_ms(100);
	__asm__ volatile("");
}

/* b waits for the child's word: how long the child slept. */
__attribute__((noinline)) long b(int fd)
{
	long slept;
	if (read(fd, &slept, sizeof slept) != sizeof slept)
		exit(1);
	__asm__ volatile("");
	return slept;
}

__attribute__((noinline)) void child(int fd)
{
	long t = now_us();
	sleep_ms(300);
	t = now_us() - t;
	if (write(fd, &t, sizeof t) != sizeof t)
		_exit(1);
	_exit(0);
}

__attribute__((noinline)) void ping(int out, int in, long n)
{
	char c = 'x';
	for (long i = 0; i < n; i++)
		if (write(out, &c, 1) != 1 || read(in, &c, 1) != 1)
			exit(1);
	__asm__ volatile("");
}

__attribute__((noinline)) void pong(int in, int out, long n)
{
	char c;
	for (long i = 0; i < n; i++)
		if (read(in, &c, 1) != 1 || write(out, &c, 1) != 1)
			_exit(1);
	_exit(0);
}

static int pingpong(long n)
{
	int there[2], back[2];
	if (pipe(there) != 0 || pipe(back) != 0)
		return 1;
	if (fork() == 0)
		pong(there[0], back[1], n);
	ping(there[1], back[0], n);
	wait(NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "pingpong") == 0)
		return pingpong(atol(argv[2]));
	int rounds = argc > 1 ? atoi(argv[1]) : 3;
	if (argc > 2)
		sleep_ms(atol(argv[2]));
	long ta = 0, tb = 0, tc = 0;
	for (int i = 0; i < rounds; i++) {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		long t = now_us();
		a();
		ta += now_us() - t;
		if (fork() == 0)
			child(p[1]);
		t = now_us();
		tc += b(p[0]);
		tb += now_us() - t;
		wait(NULL);
		close(p[0]);
		close(p[1]);
	}
	fprintf(stderr, "offcpu: a %ld us, b %ld us, child %ld us\n", ta, tb, tc);
	return 0;
}
