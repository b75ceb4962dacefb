// The fixture's probe behind a semaphore: sys/sdt.h names the counter
// provider_name_semaphore; the probe fires only while it is not 0.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short tk_guarded_semaphore __attribute__((unused)) __attribute__((section(".probes")));

void tk_fire_guarded(int i) {
	if (tk_guarded_semaphore)
		STAP_PROBE1(tk, guarded, i);
}

unsigned short tk_semaphore(void) { return tk_guarded_semaphore; }
