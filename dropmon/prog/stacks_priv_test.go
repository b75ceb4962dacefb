package prog

import (
	"encoding/binary"
	"os/exec"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/loader"
)

// TestMain runs the workloads the test binary is asked for (UDP drops).
func TestMain(m *testing.M) { tooltest.Main(m) }

// A stack whose hash bucket another stack holds (bpf_get_stackid's
// -EEXIST) goes to the overflow map, and reads back from there. With one
// bucket in the stacks map, the first stack takes it and every other
// distinct stack overflows: UDP drops over IPv4 and over IPv6 are two
// distinct stacks at least, so one of them must come back from the
// overflow map. Two overflowed stacks can share a bucket of the overflow
// map too (one chance in about 2048 per pair: arm64's drops gave five
// distinct stacks, and one run in CI drew it); the program then keeps
// -EEXIST as the id and the report counts that stack as lost. Every other
// id must read back.
func TestStackOverflowMap(t *testing.T) {
	privtest.Require(t)
	privtest.NeedTracepointStacks(t) // the ids differ by their frames
	if !hook.HaveRawTracepoints() {
		t.Fatal("the matrix's kernels all have raw tracepoints (4.17+)")
	}
	spec, err := Collection(Config{Layout: hostLayout(t), Protocol: -1, Stacks: true, Hook: hook.Raw})
	if err != nil {
		t.Fatal(err)
	}
	spec.Maps["stacks"].MaxEntries = 1
	coll, err := loader.Load(spec, true)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	lk, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "kfree_skb", Program: coll.Programs[Name]})
	if err != nil {
		t.Fatal(err)
	}
	for _, work := range []string{tooltest.UDPDrops(t, 5), tooltest.UDP6Drops(t, 5)} {
		if out, err := exec.Command("/bin/sh", "-c", work).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", work, err, out)
		}
	}
	lk.Close()

	// Every key's stack id: the hash's keys, and the per-CPU cache's.
	var ids []int32
	var key [16]byte
	var val uint64
	it := coll.Maps["drops"].Iterate()
	for it.Next(&key, &val) {
		ids = append(ids, int32(binary.LittleEndian.Uint32(key[12:])))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	var slot uint32
	var slots [][24]byte
	cit := coll.Maps["cache"].Iterate()
	for cit.Next(&slot, &slots) {
		for _, s := range slots {
			if binary.LittleEndian.Uint64(s[16:]) > 0 {
				ids = append(ids, int32(binary.LittleEndian.Uint32(s[12:])))
			}
		}
	}
	if err := cit.Err(); err != nil {
		t.Fatal(err)
	}
	overflowed := 0
	for _, id := range ids {
		if id == eexist {
			t.Logf("stack id %d: collided in the overflow map as well", id)
			continue
		}
		pcs, err := Stack(coll, id)
		if err != nil || pcs[0] == 0 {
			t.Errorf("stack id %d: %v, first frame 0x%x", id, err, pcs[0])
		}
		if id >= MaxStacks {
			overflowed++
		}
	}
	if len(ids) < 2 || overflowed == 0 {
		t.Errorf("stack ids %v: want two or more, some from the overflow map (%d and up)", ids, MaxStacks)
	}
	t.Logf("stack ids %v", ids)
}
