// tlslib: the shared libraries of the tls fixture, one source built with
// -DLIB=NAME and each access model of thread-locals (build.sh): LIB_set(n)
// sets this thread's LIB_req = n (exported) and LIB_local = n + 1 (static:
// local-dynamic where the library's model is general-dynamic).
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(x) CAT(LIB, x)

__thread long NAME(_req);
static __thread long NAME(_local);

void NAME(_set)(long n) {
	NAME(_req) = n;
	NAME(_local) = n + 1;
}

long NAME(_get)(void) { return NAME(_local); }
