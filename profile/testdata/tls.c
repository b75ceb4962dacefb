// tls: the fixture of profile --label. The main thread spins in two phases,
// each with its own values of the executable's thread-locals (an integer,
// a char *, a char array) and of a global; a second thread spins all along
// with values of its own. "tls SECS" spins SECS per phase.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread long tk_req;
__thread const char *tk_ep;
__thread char tk_tenant[16];
long tk_phase;

static volatile unsigned long sink;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin(double secs) {
	double end = now() + secs;
	while (now() < end)
		for (int i = 0; i < 10000; i++)
			sink += i;
}

static double phase = 0.5;

static void *other(void *arg) {
	(void)arg;
	tk_req = 999;
	tk_ep = "/other";
	strcpy(tk_tenant, "t-other");
	spin(2 * phase);
	return NULL;
}

int main(int argc, char **argv) {
	pthread_t t;
	if (argc > 1)
		phase = atof(argv[1]);
	pthread_create(&t, NULL, other, NULL);
	tk_phase = 1;
	tk_ep = "/alpha";
	tk_req = 101;
	strcpy(tk_tenant, "t-a");
	spin(phase);
	tk_phase = 2;
	tk_ep = "/beta";
	tk_req = 202;
	strcpy(tk_tenant, "t-b");
	spin(phase);
	pthread_join(t, NULL);
	return 0;
}
