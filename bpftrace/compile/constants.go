package compile

// Macros are the C headers' constants the scripts users write (Debian's
// 38 tools among them) use, which bpftrace takes from the headers it
// parses and we cannot: macros leave no trace in the kernel's BTF. An
// enumerator (TCP_SYN_SENT, SKB_DROP_REASON_NOT_SPECIFIED) comes from
// BTF instead (Options.Const). The values are the kernel's ABI, the same
// on every architecture the toolkit runs on.
var Macros = map[string]int64{
	// linux/socket.h: address families.
	"AF_UNSPEC": 0, "AF_UNIX": 1, "AF_LOCAL": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17,
	// linux/sched.h: task states.
	"TASK_RUNNING": 0, "TASK_INTERRUPTIBLE": 1, "TASK_UNINTERRUPTIBLE": 2, "__TASK_STOPPED": 4, "__TASK_TRACED": 8,
	"EXIT_DEAD": 16, "EXIT_ZOMBIE": 32, "TASK_PARKED": 0x40, "TASK_DEAD": 0x80, "TASK_WAKEKILL": 0x100, "TASK_NOLOAD": 0x400,
	// linux/sched.h: task flags.
	"PF_EXITING": 0x4, "PF_KTHREAD": 0x00200000,
	// asm-generic/fcntl.h: open flags (x86-64's, arm64's, riscv64's and 32-bit ARM's but for O_DIRECTORY and O_NOFOLLOW on ARM).
	"O_RDONLY": 0, "O_WRONLY": 1, "O_RDWR": 2, "O_CREAT": 0100, "O_EXCL": 0200, "O_TRUNC": 01000, "O_APPEND": 02000, "O_NONBLOCK": 04000,
	// linux/signal.h: the signals killsnoop-like scripts compare with.
	"SIGHUP": 1, "SIGINT": 2, "SIGKILL": 9, "SIGSEGV": 11, "SIGTERM": 15, "SIGCHLD": 17, "SIGSTOP": 19,
}

// constant is a bare name's value: a header's macro, or an enumerator of
// the kernel's (Options.Const).
func (c *compiler) constant(name string) (int64, bool) {
	if v, ok := Macros[name]; ok {
		return v, true
	}
	if c.opt.Const != nil {
		return c.opt.Const(name)
	}
	return 0, false
}
