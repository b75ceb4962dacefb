// Command filter attaches an in-kernel event filter, the seed's design: a
// program compiled from a --where expression runs before the event is
// stored and returns 0 to discard it; what passes is printed.
package main

import (
	"context"
	"os"

	"github.com/tracekit/tracekit/tools"
)

type options struct {
	tools.Common
	Where string `short:"w" long:"where" value-name:"EXPR" description:"Keep only events for which EXPR holds: comparisons (== != < <= > >=) of a field, argument or pointer walk with a number or a string, joined by &&"`
	Count bool   `long:"count" description:"Count the passing events in the kernel and report the count per interval instead of printing them"`
	Info  bool   `long:"info" description:"Print the event's fields (tracepoint) or the function's signature from BTF (kprobe) and exit"`
}

const details = `EVENT is a tracepoint GROUP:NAME (net:netif_receive_skb,
syscalls:sys_enter_openat), kprobe:FUNCTION or kretprobe:FUNCTION.

In EXPR, a tracepoint's fields are named as its format file names them
(filter --info GROUP:NAME lists them): integers of any size, char arrays and
__data_loc strings. A kprobe's arguments are named as the kernel's BTF names
them (filter --info kprobe:FUNCTION), a kretprobe's return value is ret. '->'
follows a pointer whose type BTF knows, a tracepoint field included once cast:
((struct sk_buff *)skbaddr)->dev->name. Offsets come from BTF at run time, so
the same command works across kernels. An enum field with a name table in
its format takes the names as strings: reason == "NO_SOCKET".

Examples:
  filter net:netif_receive_skb --where 'name == "lo"'
  filter net:netif_receive_skb --where '((struct sk_buff *)skbaddr)->dev->name == "lo"'
  filter --count skb:kfree_skb --where 'reason == "NO_SOCKET"' 1
  filter kprobe:ip_send_skb --where 'skb->len > 100 && skb->protocol == 8'
  filter kretprobe:ksys_write --where 'ret < 0'
  filter --info kprobe:ip_send_skb

A bad --where is a usage error; the message points at the offending part.
`

func main() {
	var o options
	os.Exit(tools.Main(tools.Tool{
		Name:     "filter",
		Lead:     "EVENT",
		Summary:  "Print (or count) the events that pass an in-kernel filter.",
		Details:  details,
		Options:  &o,
		Validate: func() error { return validate(&o) },
		Run:      func(ctx context.Context, s *tools.Session) error { return run(ctx, s, &o) },
	}, os.Args[1:]))
}
