/* llvm SECS: creates and disposes of LLVM contexts and modules for SECS
 * seconds, through LLVM's C API (declared here: no headers needed), so
 * that its stacks run through libLLVM. Built by TestBigLibrary against
 * Debian's libLLVM-14.so.1, whose unwind tables (948,864 rows) and
 * libz3's beside them outgrow what profile's table once held (8 MiB). */
#include <stdlib.h>
#include <time.h>

typedef struct LLVMOpaqueContext *LLVMContextRef;
typedef struct LLVMOpaqueModule *LLVMModuleRef;
LLVMContextRef LLVMContextCreate(void);
void LLVMContextDispose(LLVMContextRef);
LLVMModuleRef LLVMModuleCreateWithNameInContext(const char *, LLVMContextRef);
void LLVMDisposeModule(LLVMModuleRef);

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100; i++) {
			LLVMContextRef c = LLVMContextCreate();
			LLVMDisposeModule(LLVMModuleCreateWithNameInContext("tk", c));
			LLVMContextDispose(c);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
