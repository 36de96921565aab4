package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgListener holds one PostgreSQL connection that LISTENs on FeedChannel
// and calls wake for every notification, reconnecting (with backoff) when
// the connection breaks; after every (re)connect it calls wake once, since
// notifications sent while it was away are lost.
type pgListener struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Listener timing.
const (
	listenPing       = 30 * time.Second // a quiet connection is pinged this often
	listenMaxBackoff = 5 * time.Second
)

func startListener(url string, wake func(), log *slog.Logger) *pgListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pgListener{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		backoff := 50 * time.Millisecond
		for ctx.Err() == nil {
			err := listenOnce(ctx, url, wake, func() { backoff = 50 * time.Millisecond })
			if ctx.Err() != nil {
				return
			}
			if log != nil {
				log.Warn("store: the PostgreSQL feed listener lost its connection; reconnecting (the live stream polls meanwhile)", "err", err, "retry_in", backoff)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, listenMaxBackoff)
		}
	}()
	return l
}

// listenOnce connects, listens and waits for notifications until the
// connection fails or ctx ends.
func listenOnce(ctx context.Context, url string, wake, connected func()) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.Connect(cctx, url)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+FeedChannel); err != nil {
		return err
	}
	connected()
	wake()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			wake()
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func (l *pgListener) stop() {
	l.cancel()
	<-l.done
}
