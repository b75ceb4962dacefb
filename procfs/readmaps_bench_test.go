package procfs

import (
	"os"
	"testing"
)

// BenchmarkReadMaps: profile reads a process's maps at its exec or first
// sample and again when a library is mapped.
func BenchmarkReadMaps(b *testing.B) {
	b.ReportAllocs()
	pid := os.Getpid()
	for i := 0; i < b.N; i++ {
		if _, err := ReadMaps(pid); err != nil {
			b.Fatal(err)
		}
	}
}
