/* offcpu: waits in known proportions under two call chains, for
 * profile --off-cpu. Each round, a sleeps 100 ms in nanosleep(2), and b
 * reads a pipe that a child process writes 300 ms after it is forked:
 * ROUNDS rounds (argv[1], 3 by default) wait 100*ROUNDS ms under main ->
 * a and 300*ROUNDS ms under main -> b. A first wait of WARM ms (argv[2],
 * 0 by default), under main alone, comes before. */
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

__attribute__((noinline)) void b(int fd)
{
	char c;
	if (read(fd, &c, 1) != 1)
		exit(1);
	__asm__ volatile("");
}

__attribute__((noinline)) void child(int fd)
{
	sleep_ms(300);
	if (write(fd, "x", 1) != 1)
		_exit(1);
	_exit(0);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 3;
	if (argc > 2)
		sleep_ms(atol(argv[2]));
	for (int i = 0; i < rounds; i++) {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		a();
		if (fork() == 0)
			child(p[1]);
		b(p[0]);
		wait(NULL);
		close(p[0]);
		close(p[1]);
	}
	return 0;
}
