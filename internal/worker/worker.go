// Package worker holds what the background senders of fw serve
// (telemetry's exporter, payloadlog's logger) share: asking their one
// goroutine to do something now and waiting for it.
package worker

import (
	"context"
	"errors"
)

// ErrStopped is Ask's answer once the goroutine has exited.
var ErrStopped = errors.New("the worker is stopped")

// Ask hands the goroutine serving reqs a channel it closes when it has done
// what was asked, and waits for that, for done (the goroutine exited:
// ErrStopped) or for ctx.
func Ask(ctx context.Context, reqs chan<- chan struct{}, done <-chan struct{}) error {
	ch := make(chan struct{})
	select {
	case reqs <- ch:
	case <-done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
