// Two functions, one per instruction set: uprobe's Thumb test
// (arm-linux-gnueabihf-gcc -O1 -nostdlib -static -Wl,--build-id=none -o arm-modes.elf modes.c).
__attribute__((target("thumb"), noinline)) int tk_thumb(int x) { return x * 3 + 1; }
__attribute__((target("arm"), noinline)) int tk_arm(int x) { return x * 5 + 2; }
void _start(void) { tk_thumb(tk_arm(1)); for (;;) ; }
