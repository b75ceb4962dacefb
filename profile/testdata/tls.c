// tls: the fixture of profile --label. The main thread spins in two phases,
// each with its own values of the executable's thread-locals (an integer,
// a char *, a char array), of a global, and of its libraries' thread-locals
// (tlslib.c, set from the phase's tk_req: tk_gd_* = req, tk_ie_* = req +
// 10, tk_desc_* = req + 20, each _local one more); a second thread spins
// all along with values of its own. libtkdl.so, opened by dlopen, gets
// tk_dl_* = req + 30 in the main thread only: the second thread never
// touches its thread-locals. "tls SECS" spins SECS per phase. -DNOLIB:
// without the libraries (a static build).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread long tk_req;
__thread const char *tk_ep;
__thread char tk_tenant[16];
long tk_phase;

static volatile unsigned long sink;

#ifdef NOLIB
static void libs_set(long n) { (void)n; }
static void libs_open(void) {}
#else
#include <dlfcn.h>
#include <stdio.h>
void tk_gd_set(long n);
void tk_ie_set(long n);
void tk_desc_set(long n);
static void (*tk_dl_set)(long n);
static void libs_set(long n) {
	tk_gd_set(n);
	tk_ie_set(n + 10);
	tk_desc_set(n + 20);
	if (tk_dl_set && n != 999)
		tk_dl_set(n + 30);
}
static void libs_open(void) {
	void *h = dlopen("libtkdl.so", RTLD_NOW);
	if (!h || !(tk_dl_set = (void (*)(long))dlsym(h, "tk_dl_set"))) {
		fprintf(stderr, "tls: %s\n", dlerror());
		exit(1);
	}
}
#endif

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
	libs_set(tk_req);
	tk_ep = "/other";
	strcpy(tk_tenant, "t-other");
	spin(2 * phase);
	return NULL;
}

int main(int argc, char **argv) {
	pthread_t t;
	if (argc > 1)
		phase = atof(argv[1]);
	libs_open();
	pthread_create(&t, NULL, other, NULL);
	tk_phase = 1;
	tk_ep = "/alpha";
	tk_req = 101;
	libs_set(tk_req);
	strcpy(tk_tenant, "t-a");
	spin(phase);
	tk_phase = 2;
	tk_ep = "/beta";
	tk_req = 202;
	libs_set(tk_req);
	strcpy(tk_tenant, "t-b");
	spin(phase);
	pthread_join(t, NULL);
	return 0;
}
