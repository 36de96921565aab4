package payloadlog

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmoto"
)

// keyed records the keys written to a bucket.
type keyed struct {
	blob.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyed) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()
	return k.Store.Put(ctx, key, r, size)
}

// TestRecordsToABucket: with a bucket as the destination, each batch is an
// NDJSON object under payloads/YYYY/MM/DD/HH/, named by the deployment: on
// a directory store, and on a real S3-protocol server (moto) in make
// test-s3.
func TestRecordsToABucket(t *testing.T) {
	stores := map[string]blob.Store{}
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stores["dir"] = dir
	if os.Getenv("FW_MOTO_SERVER") != "" || os.Getenv("FW_REQUIRE_S3") == "1" {
		m := testmoto.Start(t)
		s, err := blob.Open("s3://"+m.Bucket+"/fw", "", blob.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, PathStyle: true})
		if err != nil {
			t.Fatal(err)
		}
		stores["s3"] = s
	}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			k := &keyed{Store: st}
			l := newLogger(t, Config{Rate: 1, Dest: "s3://bucket/fw", Objects: k, Deployment: "dep/1"})
			in := []engine.Tensor{engine.FromFloat32([]int64{1, 2}, []float32{1, 2})}
			for range 3 {
				l.Log("m", "1", nil, in, nil, nil, 0, nil)
			}
			if err := l.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if c := l.Counts(); c.Sent != 3 || c.Dropped != 0 {
				t.Fatalf("counts: %+v", c)
			}
			n := 0
			for _, key := range k.keys {
				if !strings.HasPrefix(key, "payloads/") || !strings.Contains(key, "/dep_1-") || !strings.HasSuffix(key, ".jsonl") {
					t.Fatalf("object key %q", key)
				}
				r, _, err := st.Get(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(r)
				for sc.Scan() {
					var rec Record
					if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Deployment != "dep/1" {
						t.Fatalf("%s: %v %+v", key, err, rec)
					}
					n++
				}
				r.Close()
			}
			if n != 3 {
				t.Fatalf("%d records in the bucket", n)
			}
		})
	}
}
