// gospin: main.main -> main.a -> main.b -> main.c, none inlined, c
// spinning for the seconds given (default 1). The tests build it
// stripped (-ldflags='-s -w'): its names are in .gopclntab only.
package main

import (
	"os"
	"strconv"
	"time"
)

var sink int

//go:noinline
func c(secs float64) {
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		for i := 0; i < 100000; i++ {
			sink += i
		}
	}
}

//go:noinline
func b(secs float64) { c(secs) }

//go:noinline
func a(secs float64) { b(secs) }

func main() {
	secs := 1.0
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			secs = s
		}
	}
	a(secs)
}
