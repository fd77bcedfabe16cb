// wanproxy: the bench's WAN link on loopback. A TCP forwarder that delays every byte by a one-way
// latency in each direction and can cap each direction's bandwidth, shared by all connections (one
// link between two regions, not one per connection).
//
//	wanproxy -delay 50ms -rate 25000000 -route 127.0.0.1:21099=127.0.0.1:21098 [-route ...]
//
// Built once (make bench-proxy) into ~/.cache/replicator/bin. It replaces, for the bench, the Python
// asyncio proxy of the chaos tests (tests/chaos/delayproxy.py: 64 KiB chunks, 16 MiB in flight per
// direction), which shares the bench's cores with its GIL and caps a connection at 16 MiB per
// one-way delay. Here a connection may hold up to -inflight bytes per direction (default 256 MiB:
// 5 GB/s at 50 ms one way), so the link's bandwidth-delay product is never what limits a copier;
// bench/link.py measures the forwarder's own ceiling with Kafka's ProducerPerformance.
//
// On SIGTERM or SIGINT it prints the bytes it forwarded per direction and exits.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const chunkSize = 256 * 1024

type routes []string

func (r *routes) String() string     { return strings.Join(*r, ",") }
func (r *routes) Set(v string) error { *r = append(*r, v); return nil }

// direction is one way of the link: its delay, its cap, and when the capped wire is free again.
type direction struct {
	delay time.Duration
	rate  float64 // bytes per second, 0: unlimited
	mu    sync.Mutex
	free  time.Time
	bytes atomic.Int64
}

// reserve returns when n bytes, handed to the wire now, have left it.
func (d *direction) reserve(n int) time.Time {
	now := time.Now()
	if d.rate <= 0 {
		return now
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.free.Before(now) {
		d.free = now
	}
	d.free = d.free.Add(time.Duration(float64(n) / d.rate * float64(time.Second)))
	return d.free
}

type chunk struct {
	due  time.Time
	data []byte
}

var pool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// pump copies src to dst, each chunk held until its arrival time + delay (after the cap's queue),
// with at most `inflight` bytes read but not yet written.
func pump(src, dst net.Conn, d *direction, inflight int64) {
	queue := make(chan chunk, inflight/chunkSize+1)
	budget := make(chan struct{}, inflight/chunkSize+1) // one token per chunk in flight
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			if wait := time.Until(c.due); wait > 0 {
				time.Sleep(wait)
			}
			_, err := dst.Write(c.data)
			pool.Put(&c.data)
			<-budget
			if err != nil {
				_ = src.Close() // the reader's next Read fails and ends the pump
				break
			}
			d.bytes.Add(int64(len(c.data)))
		}
		for range queue { // drain the reader after a write error
			<-budget
		}
	}()
	for {
		bufp := pool.Get().(*[]byte)
		n, err := src.Read((*bufp)[:chunkSize])
		if n > 0 {
			budget <- struct{}{}
			due := d.reserve(n).Add(d.delay)
			queue <- chunk{due: due, data: (*bufp)[:n]}
		} else {
			pool.Put(bufp)
		}
		if err != nil {
			break
		}
	}
	close(queue)
	<-done
	// Kafka connections are never half-closed: one side gone, the other goes too.
	_ = dst.Close()
	_ = src.Close()
}

func serve(listen, upstream string, up, down *direction, inflight int64) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			go func() {
				server, err := net.Dial("tcp", upstream)
				if err != nil {
					_ = client.Close() // the broker is down: the client sees its connection closed
					return
				}
				go pump(client, server, up, inflight)
				pump(server, client, down, inflight)
			}()
		}
	}()
	return nil
}

func main() {
	var rs routes
	delay := flag.Duration("delay", 0, "one-way delay, each direction (e.g. 50ms for a 100 ms round trip)")
	rate := flag.Float64("rate", 0, "bandwidth cap per direction, bytes/s, shared by all routes (0: none)")
	inflight := flag.Int64("inflight", 256<<20, "bytes in flight per direction of a connection at most")
	flag.Var(&rs, "route", "LISTEN=UPSTREAM host:port pair (repeatable)")
	flag.Parse()
	if len(rs) == 0 {
		fmt.Fprintln(os.Stderr, "wanproxy: at least one -route LISTEN=UPSTREAM is needed")
		os.Exit(2)
	}
	up := &direction{delay: *delay, rate: *rate}
	down := &direction{delay: *delay, rate: *rate}
	for _, r := range rs {
		listen, upstream, ok := strings.Cut(r, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "wanproxy: -route %q is not LISTEN=UPSTREAM\n", r)
			os.Exit(2)
		}
		if err := serve(listen, upstream, up, down, *inflight); err != nil {
			fmt.Fprintf(os.Stderr, "wanproxy: %v\n", err)
			os.Exit(1)
		}
	}
	fmt.Printf("ready delay=%s rate=%.0f routes=%s\n", *delay, *rate, rs.String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	fmt.Printf("forwarded up=%d down=%d\n", up.bytes.Load(), down.bytes.Load())
}
