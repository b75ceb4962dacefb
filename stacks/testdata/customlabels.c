// customlabels: the fixture of profile's custom labels (Polar Signals'
// ABI, written here by its public layout with no library): a label set of
// {len, buf} keys and values. ABI v1 (the default): libcustomlabels.so, a
// TLSDESC library, exports custom_labels_abi_version = 1 and the
// thread-local custom_labels_current_set, a pointer to the thread's set
// {storage, count, capacity}. -DV0: the executable itself exports version
// 0 and the thread-local custom_labels_thread_local_data, the set in
// place {storage, count}. -DLIBRARY builds the library's part only.
// "customlabels SECS": a warm-up of half a phase with no set, then the
// main thread spins a phase with tenant=acme, user=u1 (and a label with
// no key, and tenant again: both left out), a phase with tenant=globex;
// a second thread spins all along with tenant=thread.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	size_t len;
	const unsigned char *buf;
} cl_string;
typedef struct {
	cl_string key, value;
} cl_label;
typedef struct {
	cl_label *storage;
	size_t count, capacity;
} cl_set;

#if defined(V0)
uint32_t custom_labels_abi_version = 0;
__thread struct {
	cl_label *storage;
	size_t count;
} custom_labels_thread_local_data;
static void use(cl_set *s) {
	custom_labels_thread_local_data.storage = s ? s->storage : NULL;
	custom_labels_thread_local_data.count = s ? s->count : 0;
}
#elif defined(LIBRARY)
uint32_t custom_labels_abi_version = 1;
__thread cl_set *custom_labels_current_set;
void cl_use(cl_set *s) { custom_labels_current_set = s; }
#else
void cl_use(cl_set *s);
static void use(cl_set *s) { cl_use(s); }
#endif

#if !defined(LIBRARY)
#include <pthread.h>
#include <time.h>

#include "spin.h"

#define S(s) {sizeof(s) - 1, (const unsigned char *)(s)}

static double phase = 0.5;

static void *other(void *arg) {
	(void)arg;
	static cl_label l[] = {{S("tenant"), S("thread")}};
	static cl_set s = {l, 1, 1};
	use(&s);
	spin(2 * phase);
	return NULL;
}

int main(int argc, char **argv) {
	static cl_label a[] = {{S("tenant"), S("acme")}, {{0, NULL}, S("nokey")}, {S("user"), S("u1")}, {S("tenant"), S("dup")}};
	static cl_set sa = {a, 4, 4};
	static cl_label b[] = {{S("tenant"), S("globex")}};
	static cl_set sb = {b, 1, 1};
	pthread_t t;
	if (argc > 1)
		phase = atof(argv[1]);
	spin(phase / 2);
	pthread_create(&t, NULL, other, NULL);
	use(&sa);
	spin(phase);
	use(&sb);
	spin(phase);
	pthread_join(t, NULL);
	return 0;
}
#endif
