package tools

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// TaskStackOffset is the offset of task_struct's stack pointer (the base
// of the task's kernel stack), from the running kernel's BTF: before 5.15
// (no bpf_task_pt_regs) a program finds a task's user registers at the top
// of that stack.
func TaskStackOffset() (int, error) {
	spec, err := KernelBTF()
	if err != nil {
		return 0, fmt.Errorf("read kernel BTF: %w", err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return 0, fmt.Errorf("kernel BTF: task_struct: %w", err)
	}
	for _, m := range task.Members {
		if m.Name == "stack" {
			return int(m.Offset.Bytes()), nil
		}
	}
	return 0, fmt.Errorf("kernel BTF: task_struct has no stack member")
}
