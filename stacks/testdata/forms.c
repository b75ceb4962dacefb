/* forms: c spins SECS (argv[2], 1 by default) under a -> b -> c, reached
 * in another form of task than main's (argv[1]):
 *   thread  a thread (pthread_create) runs it: the chain ends at the
 *           thread's root (glibc's start_thread and clone3);
 *   vfork   a vfork child runs it on its parent's stack, then _exits:
 *           the chain goes through main to _start. The child first spins
 *           50 ms outside the chain (its first samples announce it to the
 *           profiler) and sleeps 1 s while its mappings are read.
 * Built without frame pointers by the tests. It first sleeps 1 s, as
 * chain.c, while the profiler reads its tables. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "spin.h"

__attribute__((noinline)) void c(double secs)
{
	spin(secs);
	__asm__ volatile("");
}

__attribute__((noinline)) void b(double secs)
{
	c(secs);
	sink++;
}

__attribute__((noinline)) void a(double secs)
{
	b(secs);
	sink++;
}

static double secs = 1;

__attribute__((noinline)) void *run(void *arg)
{
	(void)arg;
	a(secs);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (argc > 2)
		secs = atof(argv[2]);
	usleep(1000000);
	if (strcmp(argv[1], "thread") == 0) {
		pthread_t t;
		if (pthread_create(&t, NULL, run, NULL) != 0)
			return 1;
		pthread_join(t, NULL);
		return 0;
	}
	if (strcmp(argv[1], "vfork") == 0) {
		pid_t pid = vfork();
		if (pid == 0) {
			spin(0.05);
			usleep(1000000);
			a(secs);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		return 0;
	}
	return 2;
}
