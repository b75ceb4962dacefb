// otelctx: the fixture of profile's OpenTelemetry thread context (OTEP
// 4947), written here by the public layout with no library: the
// executable exports the thread-local otel_thread_ctx_v1, a pointer to the
// thread's record {u8 trace_id[16]; u8 span_id[8]; u8 valid; u8 reserved;
// u16 attrs_data_size; attrs {u8 key index; u8 length; bytes}...}, and
// publishes its key names in the process context (OTEP 4719: a memfd
// mapping named OTEL_CTX, a header, a protobuf payload). "otelctx SECS":
// after a warm-up of half a phase with no record, the main thread spins a
// phase in each of: alpha (GET /alpha), beta (the same record updated in
// place: POST /beta and an attribute of index 7, which no key names), half
// a phase with no record (NULL), half a phase with a record whose valid is
// 0; a second thread spins all along with its own record (/thread).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct record {
	uint8_t trace_id[16], span_id[8];
	uint8_t valid, reserved;
	uint16_t attrs_data_size;
	uint8_t attrs[612];
};

__thread void *otel_thread_ctx_v1;

#include "spin.h"

// set writes a record: ids of one repeated byte, attributes as "i=value"
// strings.
static void set(struct record *r, uint8_t trace, uint8_t span, int n, const char **attrs) {
	r->valid = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memset(r->trace_id, trace, 16);
	memset(r->span_id, span, 8);
	int off = 0;
	for (int i = 0; i < n; i++) {
		size_t len = strlen(attrs[i] + 2);
		r->attrs[off++] = attrs[i][0] - '0';
		r->attrs[off++] = len;
		memcpy(r->attrs + off, attrs[i] + 2, len);
		off += len;
	}
	r->attrs_data_size = off;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	r->valid = 1;
}

// pb appends a length-delimited protobuf field (lengths below 128).
static size_t pb(uint8_t *out, int field, const void *data, size_t len) {
	out[0] = field << 3 | 2;
	out[1] = len;
	memcpy(out + 2, data, len);
	return 2 + len;
}

// kv appends an attribute (ProcessContext field 2, a KeyValue) whose
// value (an AnyValue) is given encoded.
static size_t kv(uint8_t *out, const char *key, const uint8_t *any, size_t anylen) {
	uint8_t b[256];
	size_t n = pb(b, 1, key, strlen(key));
	n += pb(b + n, 2, any, anylen);
	return pb(out, 2, b, n);
}

static uint8_t payload[512];

static void publish(void) {
	static const char *keys[] = {"http.method", "http.route"};
	uint8_t any[256], array[256];
	size_t n = 0, a = 0, l;
	l = pb(any, 1, "tlsdesc_v1_dev", 14);
	n += kv(payload + n, "threadlocal.schema_version", any, l);
	for (int i = 0; i < 2; i++) {
		uint8_t s[64];
		size_t sl = pb(s, 1, keys[i], strlen(keys[i]));
		a += pb(array + a, 1, s, sl);
	}
	l = pb(any, 5, array, a);
	n += kv(payload + n, "threadlocal.attribute_key_map", any, l);

	long page = sysconf(_SC_PAGESIZE);
	int fd = syscall(SYS_memfd_create, "OTEL_CTX", 0);
	if (fd < 0 || ftruncate(fd, page) < 0)
		exit(1);
	uint8_t *h = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	close(fd);
	if (h == MAP_FAILED)
		exit(1);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint32_t version = 2, size = n;
	uint64_t at = (uintptr_t)payload, published = ts.tv_sec * 1000000000ull + ts.tv_nsec;
	memcpy(h, "OTEL_CTX", 8);
	memcpy(h + 8, &version, 4);
	memcpy(h + 12, &size, 4);
	memcpy(h + 24, &at, 8);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	memcpy(h + 16, &published, 8);
	prctl(PR_SET_VMA, 0 /* PR_SET_VMA_ANON_NAME */, (unsigned long)h, page, (unsigned long)"OTEL_CTX");
}

static double phase = 0.5;

static void *other(void *arg) {
	(void)arg;
	static struct record r;
	set(&r, 0x99, 0x98, 1, (const char *[]){"1=/thread"});
	otel_thread_ctx_v1 = &r;
	spin(3 * phase);
	return NULL;
}

int main(int argc, char **argv) {
	static struct record r, invalid;
	pthread_t t;
	if (argc > 1)
		phase = atof(argv[1]);
	publish();
	spin(phase / 2);
	pthread_create(&t, NULL, other, NULL);
	set(&r, 0x11, 0x21, 2, (const char *[]){"0=GET", "1=/alpha"});
	otel_thread_ctx_v1 = &r;
	spin(phase);
	set(&r, 0x11, 0x22, 3, (const char *[]){"0=POST", "1=/beta", "7=x"});
	spin(phase);
	otel_thread_ctx_v1 = NULL;
	spin(phase / 2);
	set(&invalid, 0x55, 0x55, 1, (const char *[]){"0=BAD"});
	invalid.valid = 0;
	otel_thread_ctx_v1 = &invalid;
	spin(phase / 2);
	pthread_join(t, NULL);
	return 0;
}
