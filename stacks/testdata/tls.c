// tls: the fixture of profile --label. The main thread spins in two phases,
// each with its own values of the executable's thread-locals (an integer,
// a char *, a char array), of a global, and of its libraries' thread-locals
// (tlslib.c, set from the phase's tk_req: tk_gd_* = req, tk_ie_* = req +
// 10, tk_desc_* = req + 20, each _local one more); a second thread spins
// all along with values of its own (after a warm-up of the main thread, req
// 1 and a NULL tk_ep, half a phase). The strobe_* thread-locals carry the
// same values in the seed's layouts. libtkdl.so, opened by dlopen, gets
// tk_dl_* = req + 30 in the main thread only: the second thread never
// touches its thread-locals. "tls SECS [WARM]" spins SECS per phase,
// after a warm-up of WARM seconds (SECS/2 by default). -DNOLIB:
// without the libraries (a static build).
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread long tk_req;
__thread const char *tk_ep;
__thread char tk_tenant[16];
long tk_phase;

// The seed's strobe layouts (strobemeta.h), thread-locals of the
// executable: strobe_set writes them all from the thread's values; a
// thread that says set=0 leaves its int's header len 0 (unset).
struct strobe_value_header {
	uint16_t len;
	uint8_t _reserved[6];
};
struct strobe_value_int {
	struct strobe_value_header header;
	int64_t value;
};
struct strobe_value_str {
	struct strobe_value_header header;
	const char *value;
};
struct strobe_map_entry {
	const char *key, *val;
};
struct strobe_map_raw {
	int64_t id, cnt;
	const char *tag;
	struct strobe_map_entry entries[4];
};
struct strobe_value_map {
	struct strobe_value_header header;
	const struct strobe_map_raw *value;
};
__thread struct strobe_value_int tk_strobe_int;
__thread struct strobe_value_str tk_strobe_str;
__thread struct strobe_value_map tk_strobe_map;
static __thread struct strobe_map_raw tk_strobe_raw;

static void strobe_set(long req, const char *str, const char *tag, int cnt, int set) {
	tk_strobe_int.header.len = set;
	tk_strobe_int.value = req;
	tk_strobe_str.header.len = 1;
	tk_strobe_str.value = str;
	tk_strobe_raw.id = req;
	tk_strobe_raw.cnt = cnt;
	tk_strobe_raw.tag = tag;
	tk_strobe_raw.entries[0] = (struct strobe_map_entry){"ep", tk_ep};
	tk_strobe_raw.entries[1] = (struct strobe_map_entry){"tenant", tk_tenant};
	tk_strobe_raw.entries[2] = (struct strobe_map_entry){"k3", "v3"};
	tk_strobe_raw.entries[3] = (struct strobe_map_entry){"k4", "v4"};
	tk_strobe_map.header.len = 1;
	tk_strobe_map.value = &tk_strobe_raw;
}

// long: 100 characters, more than a label keeps.
static const char long_str[] = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

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

#include "spin.h"

static double phase = 0.5;

static void *other(void *arg) {
	(void)arg;
	tk_req = 999;
	libs_set(tk_req);
	tk_ep = "/other";
	strcpy(tk_tenant, "t-other");
	strobe_set(tk_req, long_str, NULL, 1, 0);
	spin(2 * phase);
	return NULL;
}

// main_phase sets the main thread's values of a phase, then spins.
static void main_phase(long n, const char *ep, long req, const char *tenant) {
	tk_phase = n;
	tk_ep = ep;
	tk_req = req;
	libs_set(tk_req);
	strcpy(tk_tenant, tenant);
	strobe_set(tk_req, tk_ep, "phase", 4, 1);
	spin(phase);
	__asm__ volatile("" ::: "memory"); // a call, not a jump: main_phase stays on the stack
}

int main(int argc, char **argv) {
	pthread_t t;
	if (argc > 1)
		phase = atof(argv[1]);
	double warm = argc > 2 ? atof(argv[2]) : phase / 2;
	libs_open();
	// A warm-up, before the second thread: profile places the labels of
	// the libraries as it sees them mapped and filled in.
	tk_ep = NULL;
	tk_req = 1;
	libs_set(tk_req);
	strcpy(tk_tenant, "t-w");
	strobe_set(tk_req, NULL, "warmup", 4, 1);
	spin(warm);
	pthread_create(&t, NULL, other, NULL);
	main_phase(1, "/alpha", 101, "t-a");
	main_phase(2, "/beta", 202, "t-b");
	pthread_join(t, NULL);
	return 0;
}
