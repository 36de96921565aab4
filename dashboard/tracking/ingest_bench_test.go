package tracking

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
)

// BenchmarkIngestSDK: POST /api/ingest's work for the body fw.track sends
// (bench/track_sdk.py's shape): one op is a JSON array of 1,000 metrics
// events of 10 keys each, new steps each time, decoded and applied to SQLite
// with the live stream's feed.
// go test -bench IngestSDK -benchtime 100x ./dashboard/tracking
func BenchmarkIngestSDK(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Dir: b.TempDir(), Feed: FeedOf}) // as the dashboard opens it
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const run, events, keys = "0123456789abcdef", 1000, 10
	if _, err := Ingest(ctx, st, []byte(`[{"type":"run_start","run_id":"`+run+`","writer":"w","seq":1,"experiment":"bench"}]`)); err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, b.N)
	for i := range bodies {
		var sb strings.Builder
		sb.WriteByte('[')
		for e := 0; e < events; e++ {
			step := i*events + e
			if e > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"type":"metrics","step":`)
			fmt.Fprint(&sb, step)
			sb.WriteString(`,"values":{`)
			for k := 0; k < keys; k++ {
				if k > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `"loss%d":%v`, k, float64(step)*0.001)
			}
			fmt.Fprintf(&sb, `},"time":1764400000.%06d,"run_id":"%s","writer":"w","seq":%d}`, e, run, step+2)
		}
		sb.WriteByte(']')
		bodies[i] = []byte(sb.String())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Ingest(ctx, st, bodies[i])
		if err != nil || len(res.Errors) > 0 || res.Applied != events {
			b.Fatalf("batch %d: %v %+v", i, err, res.Errors)
		}
	}
	b.ReportMetric(float64(b.N*events*keys)/b.Elapsed().Seconds(), "points/s")
}
